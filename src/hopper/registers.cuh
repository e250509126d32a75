// setmaxnreg (sm_90a): the single home for register reallocation between warpgroups.
// It only takes effect when the kernel is compiled with a register cap at entry
// (__launch_bounds__(threads, 1)) and each role is one branch of a single if/else.
#pragma once

namespace lowbit::hopper {

template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes 24..256 by 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes 24..256 by 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace lowbit::hopper
