// What lowbit asks of the GPU it runs on: read from the device, never hard-coded.
#pragma once

#include <cstddef>
#include <string>

#include "lowbit/status.h"

namespace lowbit {

struct DeviceInfo {
  int device = -1;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;  // the most dynamic shared memory one block may request
  size_t smem_per_sm = 0;
  // The device reads pageable host memory (HMM or ATS): then lowbit accepts such pointers.
  bool reads_pageable_memory = false;
  bool is_hopper() const { return cc_major == 9 && cc_minor == 0; }
};

// Properties of the current device (cached per device). Fails with kUnsupportedDevice when
// there is no CUDA device at all, and with kInvalidArgument for a null `out`. Thread-safe; it also
// makes the device's primary context current on a thread that has none, so a thread's first
// CUDA call may be any lowbit call.
Status query_device(DeviceInfo* out);

// Ok only on an sm_90 GPU; otherwise a message that says what was found. `out` may be null.
Status require_hopper(DeviceInfo* out = nullptr);

}  // namespace lowbit
