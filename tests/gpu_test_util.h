// What every GPU test file shares: a fixture that skips (with the reason) without a Hopper GPU,
// a device buffer that frees itself, and CUDA_OK.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

#include "formats/bf16.h"
#include "lowbit/device.h"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

namespace lowbit_test {

// Without a Hopper GPU every GPU test skips, with the reason. LOWBIT_REQUIRE_GPU=1 (a run meant
// to exercise the GPU, e.g. on the device) turns that into a failure, so a run that silently
// skipped everything cannot pass.
class HopperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const lowbit::Status st = lowbit::require_hopper();
    if (st.ok()) return;
    const char* required = std::getenv("LOWBIT_REQUIRE_GPU");
    if (required && std::string(required) == "1") {
      GTEST_FAIL() << "LOWBIT_REQUIRE_GPU=1 but no Hopper GPU: " << st.to_string();
    }
    GTEST_SKIP() << "no Hopper GPU: " << st.to_string();
  }
};

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b ? b : 16) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class V>
  void upload(const std::vector<V>& v) {
    ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
  }
};

// An integer in [-range, range] (exact in BF16 for range <= 256) from a hash of (row, column,
// seed): test tensors whose rows never repeat, so a kernel that reads the wrong row shows.
inline uint16_t hashed_int_bf16(uint64_t row, uint64_t col, uint64_t seed, int range) {
  uint64_t h = row * 0x9E3779B97F4A7C15ull ^ (col + 1) * 0xC2B2AE3D27D4EB4Full ^ seed * 0x165667B19E3779F9ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const int v = static_cast<int>(h % static_cast<uint64_t>(2 * range + 1)) - range;
  return lowbit::formats::float_to_bf16(static_cast<float>(v));
}

}  // namespace lowbit_test
