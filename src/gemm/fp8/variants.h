// The compiled FP8 GEMM kernel variants, as data: the chooser scores them, the bench can force
// any of them, and launch.cu instantiates exactly this list.
#pragma once

namespace lowbit::fp8 {

struct Fp8Variant {
  int block_n;
  int stages;
  const char* note;
};

// Stages fill what is left of 227 KiB after 32 KiB of epilogue staging and 2 KiB of barriers
// and alignment slack: (232448 - 32768 - 2048) / (16 KiB of A + block_n * 128 bytes of B).
constexpr int fp8_stages_for(int block_n) { return (232448 - 32768 - 2048) / (16384 + block_n * 128); }

// With promotion each consumer thread holds 2 x block_n / 2 accumulator registers, so 192 is
// the widest tile that fits in the 232 registers a consumer gets.
constexpr Fp8Variant kFp8Variants[] = {
    {64, fp8_stages_for(64), "narrow: more tiles for small M, deepest pipeline"},
    {128, fp8_stages_for(128), "balanced default"},
    {192, fp8_stages_for(192), "wide: least shared-memory traffic per FLOP for large M"},
};
constexpr int kNumFp8Variants = sizeof(kFp8Variants) / sizeof(kFp8Variants[0]);

}  // namespace lowbit::fp8
