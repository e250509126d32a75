// Compile-only check (never launched): every generated sparse wgmma wrapper must assemble for
// sm_90a. Built by the ptxas.wgmma_sp_wrappers test so that a wrong operand order fails in CI,
// not on the GPU.
#include "hopper/wgmma.cuh"

namespace {

template <lowbit::hopper::WgmmaKind Kind, int N>
__device__ void use(float* out, uint64_t da, uint64_t db, uint32_t meta) {
  using Op = lowbit::hopper::WgmmaSpOp<Kind, N>;
  float d[Op::kRegs];
#pragma unroll
  for (int i = 0; i < Op::kRegs; ++i) d[i] = 0.0f;
  lowbit::hopper::wgmma_fence();
  Op::mma(d, da, db, meta, false);
  lowbit::hopper::wgmma_commit_group();
  lowbit::hopper::wgmma_wait_group<0>();
  lowbit::hopper::fence_operands(d);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < Op::kRegs; ++i) s += d[i];
  out[threadIdx.x] = s;
}

}  // namespace

__global__ void __launch_bounds__(128, 1) wgmma_sp_compile(float* out, uint64_t da, uint64_t db, uint32_t meta) {
  using lowbit::hopper::WgmmaKind;
  use<WgmmaKind::kE4M3, 16>(out, da, db, meta);
  use<WgmmaKind::kE4M3, 128>(out, da, db, meta);
  use<WgmmaKind::kE4M3, 256>(out, da, db, meta);
  use<WgmmaKind::kF16, 64>(out, da, db, meta);
  use<WgmmaKind::kF16, 256>(out, da, db, meta);
  use<WgmmaKind::kBF16, 192>(out, da, db, meta);
}
