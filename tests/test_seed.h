// Fresh random inputs each run, reproducible from the printed seed: LOWBIT_TEST_SEED=<n>
// replays a failing run.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace lowbit_test {

inline uint64_t seed() {
  static const uint64_t s = [] {
    uint64_t v;
    if (const char* e = std::getenv("LOWBIT_TEST_SEED")) v = std::strtoull(e, nullptr, 10);
    else v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007ull;
    std::printf("[lowbit] test seed %llu (set LOWBIT_TEST_SEED to replay)\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

}  // namespace lowbit_test
