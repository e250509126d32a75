// Bad input returns a Status with a message before anything touches the GPU, so these run
// everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "lowbit/device.h"
#include "lowbit/gemm.h"

using namespace lowbit;

namespace {

Fp8GemmArgs valid_args() {
  Fp8GemmArgs a;
  a.m = 128;
  a.n = 256;
  a.k = 512;
  a.a = reinterpret_cast<const void*>(0x10000);
  a.b = reinterpret_cast<const void*>(0x20000);
  a.d = reinterpret_cast<void*>(0x30000);
  return a;
}

void expect_invalid(const Fp8GemmArgs& a, const char* needle) {
  const Status st = fp8_gemm(a, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

}  // namespace

TEST(Fp8Validation, RejectsBadShapes) {
  auto a = valid_args();
  a.m = 0;
  expect_invalid(a, "M must be");
  a = valid_args();
  a.m = -5;
  expect_invalid(a, "M must be");
  a = valid_args();
  a.n = 40;
  expect_invalid(a, "N must be");
  a = valid_args();
  a.k = 24;
  expect_invalid(a, "K must be");
  a = valid_args();
  a.k = 0;
  expect_invalid(a, "K must be");
  a = valid_args();
  a.m = int64_t(1) << 32;
  expect_invalid(a, "below 2^31");
}

TEST(Fp8Validation, RejectsBadPointers) {
  auto a = valid_args();
  a.a = nullptr;
  expect_invalid(a, "non-null");
  a = valid_args();
  a.d = nullptr;
  expect_invalid(a, "non-null");
  a = valid_args();
  a.b = reinterpret_cast<const void*>(0x20008);
  expect_invalid(a, "16-byte aligned");
  a = valid_args();
  a.bias = reinterpret_cast<const void*>(0x40002);
  expect_invalid(a, "bias must be 16-byte aligned");
  a = valid_args();
  a.a_scale = reinterpret_cast<const float*>(0x40002);
  expect_invalid(a, "scale pointers");
  a = valid_args();
  a.workspace_bytes = 1024;
  expect_invalid(a, "null workspace");
}

TEST(Fp8Validation, NoHopperGivesUnsupportedDevice) {
  DeviceInfo d;
  if (require_hopper(&d).ok()) GTEST_SKIP() << "a Hopper GPU is present: this test covers machines without one";
  const Status st = fp8_gemm(valid_args(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupportedDevice) << st.to_string();
  EXPECT_FALSE(st.message().empty());
}
