#!/usr/bin/env python3
"""Generates src/hopper/wgmma_ops.inc: one specialization of WgmmaOp per (operand kind, N).

wgmma names every accumulator register in its operand list, so each N needs its own asm
statement. Writing 20 of them by hand invites typos that only show up as wrong numbers on
the GPU; generating them keeps the PTX for the whole family in one reviewed template.

Usage: python3 tools/gen_wgmma.py > src/hopper/wgmma_ops.inc
"""

KINDS = {
    # name: (ptx type suffix, K per instruction, has transpose immediates)
    "kE4M3": ("f32.e4m3.e4m3", 32, False),
    "kBF16": ("f32.bf16.bf16", 16, True),
    "kF16": ("f32.f16.f16", 16, True),
}
NS = [16, 32, 64, 96, 128, 192, 256]
# Dense E4M3 only: the FP8 GEMM's in-between tile width.
E4M3_EXTRA_NS = [176]


def op(kind, n):
    ptx, k, trans = KINDS[kind]
    regs = n // 2
    dlist = ", ".join(f"%{i}" for i in range(regs))
    da, db, acc = regs, regs + 1, regs + 2
    tail = ", 0, 0" if trans else ""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return f"""template <>
struct WgmmaOp<WgmmaKind::{kind}, {n}> {{
  static constexpr int kN = {n};
  static constexpr int kK = {k};
  static constexpr int kRegs = {regs};
  __device__ __forceinline__ static void mma(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b,
                                             bool accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.{ptx} "
        "{{{dlist}}}, %{da}, %{db}, p, 1, 1{tail};\\n}}\\n"
        : {outs}
        : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
  }}
}};
"""


# Sparse (2:4 A) forms: K doubles, and the metadata register plus the sparsity selector (an
# immediate; 0 is the only value for 8-bit types) follow the B descriptor (PTX ISA
# "wgmma.mma_async.sp"; docs/notes/wgmma_sp_metadata.md).
SPARSE_KINDS = {
    "kE4M3": ("f32.e4m3.e4m3", 64, False),
    "kBF16": ("f32.bf16.bf16", 32, True),
    "kF16": ("f32.f16.f16", 32, True),
}


def sp_op(kind, n):
    ptx, k, trans = SPARSE_KINDS[kind]
    regs = n // 2
    dlist = ", ".join(f"%{i}" for i in range(regs))
    da, db, meta, acc = regs, regs + 1, regs + 2, regs + 3
    tail = ", 0, 0" if trans else ""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return f"""template <>
struct WgmmaSpOp<WgmmaKind::{kind}, {n}> {{
  static constexpr int kN = {n};
  static constexpr int kK = {k};  // logical K; A holds kK / 2 values per row
  static constexpr int kRegs = {regs};
  __device__ __forceinline__ static void mma(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b,
                                             uint32_t meta, bool accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n"
        "wgmma.mma_async.sp.sync.aligned.m64n{n}k{k}.{ptx} "
        "{{{dlist}}}, %{da}, %{db}, %{meta}, 0, p, 1, 1{tail};\\n}}\\n"
        : {outs}
        : "l"(desc_a), "l"(desc_b), "r"(meta), "r"(static_cast<int>(accumulate)));
  }}
}};
"""


# Register-A forms (A fragments in four 32-bit registers per thread, B from shared memory,
# K-major): for kernels that build A in registers, such as dequantized 4-bit weights. PTX ISA:
# "wgmma.mma_async ... d, a, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b".
REGA_KINDS = {"kBF16": "f32.bf16.bf16", "kF16": "f32.f16.f16"}
REGA_NS = [8, 16, 32, 64, 128, 256]


def rega_op(kind, n):
    ptx = REGA_KINDS[kind]
    regs = n // 2
    dlist = ", ".join(f"%{i}" for i in range(regs))
    a0 = regs
    db, acc = regs + 4, regs + 5
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return f"""template <>
struct WgmmaRegAOp<WgmmaKind::{kind}, {n}> {{
  static constexpr int kN = {n};
  static constexpr int kK = 16;
  static constexpr int kRegs = {regs};
  __device__ __forceinline__ static void mma(float (&d)[{regs}], const uint32_t (&a)[4], uint64_t desc_b,
                                             bool accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.{ptx} "
        "{{{dlist}}}, {{%{a0}, %{a0 + 1}, %{a0 + 2}, %{a0 + 3}}}, %{db}, p, 1, 1, 0;\\n}}\\n"
        : {outs}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
  }}
}};
"""


# Sparse register-A forms: the compressed A fragment (kK / 2 stored values per row, the same
# bytes per thread as the dense 8-bit k32 fragment: mma.m16n8k32's A per warp) in four 32-bit
# registers, B from shared memory. PTX ISA: "wgmma.mma_async.sp ... d, a, b-desc, sp-meta,
# sp-sel, scale-d, imm-scale-a, imm-scale-b[, imm-trans-b]".
SPARSE_REGA_KINDS = {
    "kE4M3": ("f32.e4m3.e4m3", 64, False),
    "kF16": ("f32.f16.f16", 32, True),
}


def sp_rega_op(kind, n):
    ptx, k, trans = SPARSE_REGA_KINDS[kind]
    regs = n // 2
    dlist = ", ".join(f"%{i}" for i in range(regs))
    a0 = regs
    db, meta, acc = regs + 4, regs + 5, regs + 6
    tail = ", 0" if trans else ""
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return f"""template <>
struct WgmmaSpRegAOp<WgmmaKind::{kind}, {n}> {{
  static constexpr int kN = {n};
  static constexpr int kK = {k};  // logical K; A holds kK / 2 values per row
  static constexpr int kRegs = {regs};
  __device__ __forceinline__ static void mma(float (&d)[{regs}], const uint32_t (&a)[4], uint64_t desc_b,
                                             uint32_t meta, bool accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n"
        "wgmma.mma_async.sp.sync.aligned.m64n{n}k{k}.{ptx} "
        "{{{dlist}}}, {{%{a0}, %{a0 + 1}, %{a0 + 2}, %{a0 + 3}}}, %{db}, %{meta}, 0, p, 1, 1{tail};\\n}}\\n"
        : {outs}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(meta), "r"(static_cast<int>(accumulate)));
  }}
}};
"""


def main():
    print("// Generated by tools/gen_wgmma.py; do not edit by hand.")
    print("// Included by src/hopper/wgmma.cuh inside namespace lowbit::hopper.")
    print()
    for kind in KINDS:
        for n in NS + (E4M3_EXTRA_NS if kind == "kE4M3" else []):
            print(op(kind, n))
    for kind in SPARSE_KINDS:
        for n in NS:
            print(sp_op(kind, n))
    for kind in REGA_KINDS:
        for n in REGA_NS:
            print(rega_op(kind, n))
    for kind in SPARSE_REGA_KINDS:
        for n in NS:
            print(sp_rega_op(kind, n))


if __name__ == "__main__":
    main()
