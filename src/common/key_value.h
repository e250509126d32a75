// "key=value,key=value" with integer values: the text form of every forceable config.
#pragma once

#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "lowbit/status.h"

namespace lowbit {

// Calls `apply(key, value)` per item in order; stops at the first error (its own or apply's).
inline Status parse_int_items(const std::string& text, const std::function<Status(const std::string&, int)>& apply) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) return Status::Invalid("config item '" + item + "' is not key=value");
    int value = 0;
    try {
      size_t used = 0;
      value = std::stoi(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (...) {
      return Status::Invalid("config item '" + item + "' has no integer value");
    }
    LOWBIT_RETURN_IF_ERROR(apply(item.substr(0, eq), value));
  }
  return Status::Ok();
}

}  // namespace lowbit
