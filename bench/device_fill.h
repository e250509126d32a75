// Device-side input generation for the bench and the GPU tests: seeded, hash-based, so the
// same seed gives the same tensor on any GPU without a host round trip.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lowbit::bench {

// E4M3 codes of uniform values in [-range, range] (RNE, saturating); never NaN.
cudaError_t fill_e4m3_uniform(void* dst, size_t count, float range, uint64_t seed, cudaStream_t s);
// E4M3 codes of small integers in [-lim, lim] (exact in E4M3 for lim <= 16).
cudaError_t fill_e4m3_int(void* dst, size_t count, int lim, uint64_t seed, cudaStream_t s);
// BF16 values uniform in [-range, range].
cudaError_t fill_bf16_uniform(void* dst, size_t count, float range, uint64_t seed, cudaStream_t s);
// Bytes uniform in [lo, hi]: packed E2M1 pairs (0..255 are all valid) or E4M3 scale codes.
cudaError_t fill_u8_range(void* dst, size_t count, int lo, int hi, uint64_t seed, cudaStream_t s);
// Positive FP32 scales 2^e * mant, e uniform in [lo_exp, hi_exp]; mant = 1 when pow2 (exact
// products), else uniform in [1, 2).
cudaError_t fill_f32_scales(float* dst, size_t count, int lo_exp, int hi_exp, bool pow2, uint64_t seed,
                            cudaStream_t s);
// FP16 values uniform in [-range, range].
cudaError_t fill_f16_uniform(void* dst, size_t count, float range, uint64_t seed, cudaStream_t s);
// Makes a row-major matrix 2:4 sparse along its rows: zeroes 2 of every 4 consecutive elements
// (1- or 2-byte elements; count % 4 == 0).
cudaError_t mask_2_4(void* dst, size_t count, int elem_bytes, uint64_t seed, cudaStream_t s);
// Poison: every 16-bit word set to `bits` (0xFFFF is a BF16 NaN and, twice, an FP32 NaN).
cudaError_t fill_u16(void* dst, size_t count_u16, uint16_t bits, cudaStream_t s);

}  // namespace lowbit::bench
