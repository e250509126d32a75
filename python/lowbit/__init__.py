"""lowbit: low-precision GEMM kernels for NVIDIA Hopper (H100/H200), as PyTorch operators.

Every operator is registered with ``torch.library`` as ``torch.ops.lowbit.<name>``, with a fake
(meta) implementation, so it works under ``torch.compile`` and CUDA-graph capture. It runs on the
current CUDA stream, on the caller's tensors, with no copies. Bad input raises ``ValueError``
(``TypeError`` for a wrong dtype or device) carrying lowbit's message.

    import torch, lowbit
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(11008, 4096, device="cuda", dtype=torch.bfloat16)
    xq, sx = lowbit.quantize_fp8_per_tensor(x)
    wq, sw = lowbit.quantize_fp8_per_tensor(w)
    y = lowbit.fp8_gemm(xq, wq, a_scale=sx, b_scale=sw)          # bf16 [16, 11008]
"""

import glob as _glob
import os as _os

import torch as _torch


def _load():
    here = _os.path.dirname(_os.path.abspath(__file__))
    libs = sorted(_glob.glob(_os.path.join(here, "_lowbit_ops*.so")))
    if not libs:
        raise ImportError(f"lowbit: the operator library _lowbit_ops*.so is missing from {here}")
    _torch.ops.load_library(libs[0])


_load()

from .ops import (  # noqa: E402
    MOE_STAGES,
    fp8_blockscaled_gemm,
    fp8_gemm,
    fp8_grouped_gemm,
    fp8_grouped_gemm_masked,
    fp8_grouped_gemm_contiguous,
    fused_moe_fp8,
    fused_moe_fp8_stage,
    fused_moe_workspace,
    fused_moe_workspace_view,
    nvfp4_gemm,
    nvfp4_grouped_gemm,
    nvfp4_prepack_weights,
    patch_embed_fp8,
    sparse24_compress,
    silu_mul_quantize_fp8,
    sparse24_gemm,
)
from .quantize import (  # noqa: E402
    quantize_fp8_1x128,
    quantize_fp8_128x128,
    quantize_fp8_per_tensor,
    quantize_fp8_per_token,
    quantize_nvfp4,
)

__version__ = _torch.ops.lowbit.version()

__all__ = [
    "fp8_gemm",
    "fp8_blockscaled_gemm",
    "fp8_grouped_gemm",
    "fp8_grouped_gemm_masked",
    "fp8_grouped_gemm_contiguous",
    "fused_moe_fp8",
    "fused_moe_fp8_stage",
    "fused_moe_workspace",
    "fused_moe_workspace_view",
    "MOE_STAGES",
    "nvfp4_gemm",
    "nvfp4_grouped_gemm",
    "nvfp4_prepack_weights",
    "patch_embed_fp8",
    "sparse24_compress",
    "sparse24_gemm",
    "silu_mul_quantize_fp8",
    "quantize_fp8_per_tensor",
    "quantize_fp8_per_token",
    "quantize_fp8_1x128",
    "quantize_fp8_128x128",
    "quantize_nvfp4",
]
