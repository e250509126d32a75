"""Quantization helpers, in PyTorch (any device), so a user needs no other library to prepare
lowbit's inputs. Each follows the recipe lowbit's own tests and kernels use (src/formats/):
scale = amax / 448 for E4M3 (amax floored so the reciprocal stays finite), values scaled by one
FP32 reciprocal per block, round to nearest even, saturating."""

from typing import Tuple

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0
E2M1_MAX = 6.0
_BLOCK_FLOOR = 1e-12  # per-block amax floor (formats/quantize.h kBlockScaleFloor)
_TENSOR_FLOOR = 1e-30  # per-tensor amax floor (kTensorAmaxFloor)


def _check_float(x: torch.Tensor, name: str, dims: int) -> None:
    if not x.is_floating_point():
        raise TypeError(f"lowbit: {name} must be a floating-point tensor, got {x.dtype}")
    if x.dim() != dims:
        raise ValueError(f"lowbit: {name} must have {dims} dimensions, got {x.dim()}")
    # The NaN/Inf check reads a GPU value on the host: not while a CUDA graph is captured (the
    # quantized values of a non-finite input are NaN then).
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    if not torch.isfinite(x).all():
        raise ValueError(f"lowbit: {name} holds NaN or Inf")


def _recip(t: torch.Tensor, numerator: float) -> torch.Tensor:
    """numerator / t, one correctly rounded FP32 division per element (a Python scalar over a
    tensor is computed as the tensor's reciprocal times the scalar: two roundings, and codes one
    step apart from lowbit's quantizers)."""
    return torch.full_like(t, numerator).div(t)


def _to_e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def quantize_fp8_per_tensor(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x -> (E4M3 codes, float32 [1] scale) with x ~= codes * scale (fp8_gemm's a_scale / b_scale)."""
    if not x.is_floating_point():
        raise TypeError(f"lowbit: x must be a floating-point tensor, got {x.dtype}")
    amax = x.detach().abs().max().float()
    if not torch.isfinite(amax):
        raise ValueError("lowbit: x holds NaN or Inf")
    zero = amax == 0
    amax = torch.where(zero, torch.full_like(amax, E4M3_MAX), amax.clamp_min(_TENSOR_FLOOR))  # all zero: scale 1
    scale = amax.div(torch.full_like(amax, E4M3_MAX))
    return _to_e4m3(x.float() * _recip(amax, E4M3_MAX)), scale.reshape(1)


def quantize_fp8_per_token(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (E4M3 codes [M, K], float32 [M] scales), one scale per row: per token for
    activations, per output channel for weights [N, K]; fp8_gemm's a_scale and b_scale take them
    as they are (``torch._scaled_mm`` as ``scale[:, None]`` and ``scale[None, :]``).

    A contiguous BF16 CUDA tensor with K a multiple of 16 is quantized by lowbit's kernel (one
    launch, no host sync, capturable; a row holding NaN or Inf gets a NaN scale and NaN codes);
    anything else by the same rule in PyTorch, which raises on NaN or Inf."""
    if (x.is_cuda and x.dtype == torch.bfloat16 and x.dim() == 2 and x.is_contiguous() and x.shape[1] % 16 == 0
            and x.shape[1] > 0):
        return torch.ops.lowbit.quantize_fp8_per_token(x)
    _check_float(x, "x", 2)
    amax = x.detach().abs().amax(dim=1).float()
    amax = torch.where(amax == 0, torch.full_like(amax, E4M3_MAX), amax.clamp_min(_TENSOR_FLOOR))
    return _to_e4m3(x.float() * _recip(amax, E4M3_MAX)[:, None]), amax.div(torch.full_like(amax, E4M3_MAX))


def quantize_fp8_1x128(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (E4M3 codes [M, K], sfa float32 [ceil(K/128), ld]): one scale per row per 128 of
    K, laid out K-block-major with ld = M rounded up to 4, as fp8_blockscaled_gemm takes them."""
    _check_float(x, "x", 2)
    m, k = x.shape
    kb = (k + 127) // 128
    xp = F.pad(x.float(), (0, kb * 128 - k)).reshape(m, kb, 128)
    amax = xp.abs().amax(dim=2).clamp_min(_BLOCK_FLOOR)  # [M, kb]
    q = _to_e4m3((xp * _recip(amax, E4M3_MAX)[:, :, None]).reshape(m, kb * 128)[:, :k])
    ld = (m + 3) // 4 * 4
    sfa = torch.zeros(kb, ld, dtype=torch.float32, device=x.device)
    sfa[:, :m] = amax.div(torch.full_like(amax, E4M3_MAX)).t()
    return q.contiguous(), sfa


def quantize_fp8_128x128(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] -> (E4M3 codes [N, K], sfb float32 [ceil(N/128), ceil(K/128)]): one scale per
    128 x 128 block (the weights' side of the block-scaled recipe)."""
    _check_float(w, "w", 2)
    n, k = w.shape
    nb, kb = (n + 127) // 128, (k + 127) // 128
    wp = F.pad(w.float(), (0, kb * 128 - k, 0, nb * 128 - n)).reshape(nb, 128, kb, 128)
    amax = wp.abs().amax(dim=(1, 3)).clamp_min(_BLOCK_FLOOR)  # [nb, kb]
    q = _to_e4m3(wp * _recip(amax, E4M3_MAX)[:, None, :, None]).reshape(nb * 128, kb * 128)[:n, :k]
    return q.contiguous(), amax.div(torch.full_like(amax, E4M3_MAX))


_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _to_e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """Round to nearest even onto the E2M1 grid, saturating at 6; returns 4-bit codes (uint8)."""
    mag = v.abs().clamp(max=E2M1_MAX)
    grid = torch.tensor(_E2M1_GRID, device=v.device)
    # Midpoints between grid points; ties go to the even code (the lower one at 0.25, 0.75, 1.25,
    # 1.75, 2.5, 3.5, 5: codes 0, 2, 2, 4, 4, 6, 6).
    mids = (grid[1:] + grid[:-1]) / 2
    idx = torch.bucketize(mag, mids, right=False)  # ties -> lower index
    tie = (mag.unsqueeze(-1) == mids).any(-1)
    up = tie & (idx % 2 == 1)
    idx = torch.where(up, idx + 1, idx)
    sign = torch.signbit(v)  # -0 and negatives that round to zero keep the sign bit (0x8), as the hardware
    return (idx | (sign.to(idx.dtype) << 3)).to(torch.uint8)


def quantize_nvfp4(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, float]:
    """x [M, K] (K a multiple of 16) -> (packed uint8 [M, K/2], scales E4M3 bytes [M, K/16],
    global_scale) with x ~= e2m1 * scale * global_scale: NVFP4, the recipe of src/formats/nvfp4.h."""
    _check_float(x, "x", 2)
    m, k = x.shape
    if k % 16:
        raise ValueError(f"lowbit: K must be a multiple of 16 for NVFP4, got {k}")
    xf = x.float()
    # enc and g in FP32, as the recipe computes them.
    amax = xf.abs().max() if xf.numel() else torch.zeros((), device=x.device)
    top = torch.full_like(amax, E2M1_MAX * E4M3_MAX)
    if float(amax) > 0:
        amax = amax.clamp_min(_TENSOR_FLOOR)
        enc, g = top.div(amax), float(amax.div(top))
    else:
        enc, g = torch.ones_like(amax), 1.0
    blocks = xf.reshape(m, k // 16, 16)
    bamax = blocks.abs().amax(dim=2)
    sf = _to_e4m3(bamax.div(torch.full_like(bamax, E2M1_MAX)) * enc)
    s = sf.float()
    mul = torch.where(s > 0, enc.expand_as(s).div(s), torch.zeros_like(s))
    codes = torch.where((s > 0)[:, :, None], _to_e2m1_codes(blocks * mul[:, :, None]), torch.zeros_like(blocks, dtype=torch.uint8))
    codes = codes.reshape(m, k)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    return packed, sf.view(torch.uint8).contiguous(), g
