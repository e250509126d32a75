// lowbit's cached description of the current device, without a copy: the launchers read it on
// every call, and DeviceInfo holds a std::string (a heap copy per call through query_device).
#pragma once

#include "lowbit/device.h"
#include "lowbit/status.h"

namespace lowbit {

// As query_device / require_hopper, but *out points into the cache (valid for the process).
Status current_device(const DeviceInfo** out);
Status current_hopper(const DeviceInfo** out);

}  // namespace lowbit
