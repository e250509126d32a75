// Bad input returns a Status with a message before anything touches the GPU, so these run
// everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "lowbit/device.h"
#include "lowbit/gemm.h"
#include "lowbit/patch_embed.h"

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

TEST(Fp8Validation, RejectsBadEpilogueArguments) {
  auto a = valid_args();
  a.row_bcast = reinterpret_cast<const void*>(0x50000);
  a.row_bcast_rows = 0;
  expect_invalid(a, "row_bcast_rows must be >= 1");
  a.row_bcast_rows = -3;
  expect_invalid(a, "row_bcast_rows must be >= 1");
  a.row_bcast_rows = 196;
  a.row_bcast = reinterpret_cast<const void*>(0x50008);
  expect_invalid(a, "row_bcast must be 16-byte aligned");
  a = valid_args();
  a.row_bcast_rows = 196;
  expect_invalid(a, "without a row_bcast tensor");
  a = valid_args();
  a.residual = reinterpret_cast<const void*>(0x60004);
  expect_invalid(a, "residual must be 16-byte aligned");
  a = valid_args();
  a.activation = static_cast<Activation>(7);
  expect_invalid(a, "unknown activation");
}

TEST(PatchEmbedValidation, RejectsBadInput) {
  PatchEmbedArgs a;
  a.m = 196 * 4;
  a.n = 768;
  a.k = 768;
  a.patches = reinterpret_cast<const void*>(0x10000);
  a.weight = reinterpret_cast<const void*>(0x20000);
  a.out = reinterpret_cast<void*>(0x30000);
  a.bias = reinterpret_cast<const void*>(0x40000);
  a.bias_len = 768;
  a.pos = reinterpret_cast<const void*>(0x50000);
  a.pos_rows = 196;
  a.pos_cols = 768;
  auto expect = [](const PatchEmbedArgs& x, const char* needle) {
    const Status st = patch_embed_fp8(x, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  auto b = a;
  b.pos_rows = 0;
  expect(b, "pos_rows (P) must be >= 1");
  b = a;
  b.m = 196 * 4 + 1;
  expect(b, "not a multiple of P");
  b = a;
  b.bias_len = 512;
  expect(b, "bias has 512 entries");
  b = a;
  b.pos_cols = 512;
  expect(b, "pos has 512 columns");
  b = a;
  b.pos = nullptr;
  expect(b, "pos is required");
  b = a;
  b.bias = reinterpret_cast<const void*>(0x40004);
  expect(b, "bias must be 16-byte aligned");
  b = a;
  b.pos = reinterpret_cast<const void*>(0x50002);
  expect(b, "row_bcast must be 16-byte aligned");
  b = a;
  b.whole_images = false;
  b.m = 196 * 4 + 1;  // allowed when the caller does not require whole images: fails later only for the device
  EXPECT_NE(patch_embed_fp8(b, nullptr).code(), StatusCode::kInvalidArgument);
}
