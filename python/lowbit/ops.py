"""Thin, documented wrappers of ``torch.ops.lowbit``: the operators themselves check every
argument (dtype, device, shape, contiguity) and raise with lowbit's message."""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

_ops = torch.ops.lowbit


def fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    out_dtype: Optional[torch.dtype] = None,
    alpha: float = 1.0,
    a_scale: Optional[torch.Tensor] = None,
    b_scale: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    residual: Optional[torch.Tensor] = None,
    activation: str = "none",
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``out = act(alpha * a_scale * b_scale * a @ b.T + bias) + residual`` in FP8 (E4M3).

    a: float8_e4m3fn [M, K]; b: float8_e4m3fn [N, K] (a Linear weight's layout), both contiguous.
    a_scale, b_scale: optional float32 CUDA tensors, the dequantization scales: one element (per
    tensor), or one per row: a_scale [M] or [M, 1] (per token), b_scale [N], [1, N] or [N, 1] (per
    output channel), as ``torch._scaled_mm`` takes rowwise scales and ``quantize_fp8_per_token``
    makes them. With M (or N) = 1 one element is per tensor, the same product.
    Per-row scales go with a bias and a residual but not with an activation.
    bias: bfloat16 [N]; residual: bfloat16 [M, N], added last (it may be ``out`` itself when out is
    bfloat16). activation: 'none', 'gelu' (erf form) or 'silu'. out_dtype: bfloat16 (default),
    float16 or float32; float16 without an activation.
    out: write into this [M, N] tensor (bfloat16, float16 or float32) instead of a new one.
    """
    if out is not None:
        return _ops.fp8_gemm.out(a, b, alpha=alpha, a_scale=a_scale, b_scale=b_scale, bias=bias,
                                 residual=residual, activation=activation, out=out)
    return _ops.fp8_gemm(a, b, out_dtype=out_dtype, alpha=alpha, a_scale=a_scale, b_scale=b_scale, bias=bias,
                         residual=residual, activation=activation)


def fp8_blockscaled_gemm(
    a: torch.Tensor, b: torch.Tensor, sfa: torch.Tensor, sfb: torch.Tensor, *, out_dtype: Optional[torch.dtype] = None
) -> torch.Tensor:
    """Block-scaled FP8 GEMM, the DeepSeek-V3 recipe: ``a @ b.T`` with a 1x128 scale per row of a
    per 128 of K and a 128x128 scale per block of b, promoted in FP32 per K block.

    a: float8_e4m3fn [M, K]; b: float8_e4m3fn [N, K].
    sfa: float32 [ceil(K/128), ld], ld >= M, a multiple of 4 (K-block-major: ``quantize_fp8_1x128``).
    sfb: float32 [ceil(N/128), ceil(K/128)] (``quantize_fp8_128x128``).
    """
    return _ops.fp8_blockscaled_gemm(a, b, sfa, sfb, out_dtype=out_dtype)


def fp8_grouped_gemm(
    a: Sequence[torch.Tensor],
    b: Sequence[torch.Tensor],
    sfa: Sequence[torch.Tensor],
    sfb: Sequence[torch.Tensor],
    *,
    out_dtype: Optional[torch.dtype] = None,
    check: bool = False,
) -> List[torch.Tensor]:
    """Block-scaled FP8 GEMMs of several groups in one launch: ``[fp8_blockscaled_gemm(a[g], b[g],
    sfa[g], sfb[g]) for g]``, each group's tensors as ``fp8_blockscaled_gemm`` takes them (N and K
    multiples of 16; M may be 0, giving an empty [0, N] output). All on one CUDA device.

    The descriptors are built on the host and copied to the device on the current stream (the
    call does not synchronize and is capturable in a CUDA graph: a graph replays the groups it
    captured, with whatever the captured tensors then hold). Every group is validated on the host
    before anything launches: a bad one raises ValueError naming it. ``check=True`` also reads the
    device's status block after the call (waits for the GPU; skipped while the stream captures).
    Returns one [M_g, N_g] tensor of out_dtype (bfloat16 default, or float32) per group.
    """
    _some_groups(a, "fp8_grouped_gemm")
    return _ops.fp8_grouped_gemm(list(a), list(b), list(sfa), list(sfb), out_dtype=out_dtype, check=check)


def fp8_grouped_gemm_masked(
    a: torch.Tensor,
    b: torch.Tensor,
    sfa: torch.Tensor,
    sfb: torch.Tensor,
    masked_m: torch.Tensor,
    *,
    out_dtype: Optional[torch.dtype] = None,
    check: bool = False,
) -> torch.Tensor:
    """Block-scaled FP8 GEMMs in DeepGEMM's masked layout (MoE decode): for each group g,
    ``out[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T`` with the block scales.

    a: float8_e4m3fn [G, max_m, K]; b: float8_e4m3fn [G, N, K] (N and K multiples of 16).
    sfa: float32 [G, ceil(K/128), ld], ld >= max_m and a multiple of 4 (each group's as
    ``quantize_fp8_1x128`` makes them, stacked); sfb: float32 [G, ceil(N/128), ceil(K/128)].
    masked_m: int32 [G] on the device, each in [0, max_m]; read by the GPU, so a CUDA graph replays
    with whatever the routing wrote there. Returns [G, max_m, N] of out_dtype (bfloat16 default, or
    float32); rows at and past masked_m[g] are not written (uninitialized). A count outside
    [0, max_m] skips its group; ``check=True`` reads the device's status block after the call (waits
    for the GPU; skipped while the stream captures) and raises naming it.
    """
    return _ops.fp8_grouped_gemm_masked(a, b, sfa, sfb, masked_m, out_dtype=out_dtype, check=check)


def fp8_grouped_gemm_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    sfa: torch.Tensor,
    sfb: torch.Tensor,
    offsets: torch.Tensor,
    *,
    out_dtype: Optional[torch.dtype] = None,
    check: bool = False,
) -> torch.Tensor:
    """Block-scaled FP8 GEMMs in DeepGEMM's contiguous layout (MoE prefill): the groups' rows one
    after the other, ``out[offsets[g]:offsets[g+1]] = a[offsets[g]:offsets[g+1]] @ b[g].T`` with the
    block scales.

    a: float8_e4m3fn [rows, K] with sfa float32 [ceil(K/128), ld], ld >= rows (``quantize_fp8_1x128``
    of the whole batch); b: float8_e4m3fn [G, N, K] with sfb float32 [G, ceil(N/128), ceil(K/128)]
    (N and K multiples of 16). offsets: int32 [G + 1] on the device, non-decreasing within [0, rows],
    each non-empty group starting on a multiple of 4 rows (sizes need not be multiples of 128); read
    by the GPU, so a CUDA graph replays with new group sizes. Returns [rows, N] of out_dtype
    (bfloat16 default, or float32); rows past offsets[G] are not written (uninitialized). A group
    whose offsets break the rules is skipped; ``check=True`` reads the device's status block after
    the call (waits for the GPU; skipped while the stream captures) and raises naming it.
    """
    return _ops.fp8_grouped_gemm_contiguous(a, b, sfa, sfb, offsets, out_dtype=out_dtype, check=check)


def _some_groups(a: Sequence[torch.Tensor], op: str) -> None:
    # The operator cannot dispatch without a tensor to pick the device by.
    if len(a) == 0:
        raise ValueError(f"lowbit: {op}: groups must be >= 1 (got 0)")


def _per_group(value: Union[float, Sequence[float], None], groups: int) -> List[float]:
    if value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)] * groups
    return [float(v) for v in value]


def nvfp4_grouped_gemm(
    a: Sequence[torch.Tensor],
    b_prepacked: Sequence[torch.Tensor],
    n: Sequence[int],
    *,
    a_scales: Optional[Sequence[torch.Tensor]] = None,
    a_global_scale: Union[float, Sequence[float], None] = None,
    b_global_scale: Union[float, Sequence[float], None] = None,
    check: bool = False,
) -> List[torch.Tensor]:
    """NVFP4 GEMMs of several groups (e.g. the experts of an MoE layer) in one launch:
    ``[nvfp4_gemm(a[g], b_prepacked[g], n[g], ...) for g]``.

    a: per group bfloat16 [M_g, K_g] (W4A16), or, with ``a_scales``, NVFP4 uint8 [M_g, K_g/2] with
    E4M3 scales [M_g, K_g/16] (every group alike). M_g may be 0 (an empty output).
    b_prepacked[g]: ``nvfp4_prepack_weights`` of the group's [n[g], K_g] weights.
    a_global_scale, b_global_scale: one float for every group, or one per group (default 1).
    Capturable, validated on the host, ``check`` as in ``fp8_grouped_gemm``. Returns bfloat16
    [M_g, n[g]] per group.
    """
    _some_groups(a, "nvfp4_grouped_gemm")
    groups = len(a)
    return _ops.nvfp4_grouped_gemm(list(a), None if a_scales is None else list(a_scales), list(b_prepacked),
                                   [int(v) for v in n],
                                   a_global_scales=_per_group(a_global_scale, groups),
                                   b_global_scales=_per_group(b_global_scale, groups), check=check)


def nvfp4_prepack_weights(packed: torch.Tensor, scales: torch.Tensor, k: int, *, swizzled: bool = False) -> torch.Tensor:
    """Prepacks NVFP4 weights [N, K] (once, at load time) into the GEMM's layout.

    packed: uint8 [N, K/2] (two E2M1 values a byte, low nibble first); scales: E4M3 bytes
    [N, K/16] row-major, or the 128x4 swizzled layout of cuBLASLt/CUTLASS with ``swizzled=True``.
    """
    return _ops.nvfp4_prepack_weights(packed, scales, k, swizzled=swizzled)


def nvfp4_gemm(
    a: torch.Tensor,
    b_prepacked: torch.Tensor,
    n: int,
    *,
    a_scales: Optional[torch.Tensor] = None,
    a_global_scale: float = 1.0,
    b_global_scale: float = 1.0,
) -> torch.Tensor:
    """``a @ w.T * a_global_scale * b_global_scale`` with NVFP4 weights w [n, K] (prepacked).

    a: bfloat16 [M, K] (W4A16), or NVFP4 uint8 [M, K/2] with ``a_scales`` E4M3 [M, K/16].
    Returns bfloat16 [M, n].
    """
    return _ops.nvfp4_gemm(a, a_scales, b_prepacked, n, a_global_scale=a_global_scale, b_global_scale=b_global_scale)


def sparse24_compress(dense: torch.Tensor, *, prune: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Compresses a 2:4-sparse matrix [M, K] (float8_e4m3fn or float16) into (values [M, K/2],
    metadata). Without ``prune`` a group with more than two nonzeros raises ValueError naming it
    (this waits for the GPU); with ``prune`` each group keeps its two largest magnitudes."""
    return _ops.sparse24_compress(dense, prune=prune)


def sparse24_gemm(
    a_values: torch.Tensor,
    a_meta: torch.Tensor,
    b: torch.Tensor,
    *,
    alpha: float = 1.0,
    a_scale: Optional[torch.Tensor] = None,
    b_scale: Optional[torch.Tensor] = None,
    fast_accum: bool = False,
) -> torch.Tensor:
    """``alpha * a_scale * b_scale * A @ b.T`` with A 2:4-sparse (``sparse24_compress``'s output) and
    b dense [N, K]. E4M3 writes bfloat16, float16 writes float16. A model's sparse weight W [O, K]
    goes on the A side: ``sparse24_gemm(W values, W meta, X)`` is (X @ W.T).T."""
    return _ops.sparse24_gemm(a_values, a_meta, b, alpha=alpha, a_scale=a_scale, b_scale=b_scale,
                              fast_accum=fast_accum)


def patch_embed_fp8(
    patches: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    pos: torch.Tensor,
    *,
    alpha: float = 1.0,
    patches_scale: Optional[torch.Tensor] = None,
    weight_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The ViT patch embedding in one launch: ``patches @ weight.T * scales + bias + pos[row % P]``.

    patches: float8_e4m3fn [M, K] (M a multiple of P); weight: float8_e4m3fn [N, K];
    bias: bfloat16 [N]; pos: bfloat16 [P, N]. Returns bfloat16 [M, N].
    """
    return _ops.patch_embed_fp8(patches, weight, bias, pos, alpha=alpha, patches_scale=patches_scale,
                                weight_scale=weight_scale)


def fused_moe_fp8(
    x: torch.Tensor,
    w: torch.Tensor,
    w_scales: torch.Tensor,
    top_k: int,
    *,
    logits: Optional[torch.Tensor] = None,
    topk_ids: Optional[torch.Tensor] = None,
    topk_weights: Optional[torch.Tensor] = None,
    softcap: float = 0.0,
    renormalize: bool = True,
    deterministic: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """The fused FP8 Mixture-of-Experts forward: route (softcap, softmax, top-k), quantize x per
    token per 128 of K, the block-scaled expert GEMM with the weighted scatter fused in.

    x: bfloat16 [M, K]; w: float8_e4m3fn [experts, N, K]; w_scales: float32
    [experts, ceil(N/128), K/128]. Route from ``logits`` (float32 or bfloat16 [M, experts]) or pass
    the routing (``topk_ids`` int32 and ``topk_weights`` float32, both [M, top_k]).
    ``deterministic``: bitwise reproducible sums. Returns [M, N] of out_dtype (bfloat16 default).
    """
    return _ops.fused_moe_fp8(x, w, w_scales, logits, topk_ids, topk_weights, top_k, softcap=softcap,
                              renormalize=renormalize, deterministic=deterministic, out_dtype=out_dtype)


MOE_STAGES = ("route", "layout", "quantize_gather", "expert_gemm", "finish")


def fused_moe_workspace(
    x: torch.Tensor,
    w: torch.Tensor,
    top_k: int,
    *,
    deterministic: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """The zero-filled uint8 workspace ``fused_moe_fp8_stage`` keeps its state in, sized for x's
    token count, w's shape, top_k, the reduce mode and the output dtype (the stages' y dtype).
    Allocate it once per shape; one workspace serves one forward pass at a time (stages that may run
    concurrently, on other streams, need their own)."""
    return _ops.fused_moe_workspace(x, w, top_k, deterministic=deterministic, out_dtype=out_dtype)


def fused_moe_fp8_stage(
    stage: str,
    x: torch.Tensor,
    w: torch.Tensor,
    w_scales: torch.Tensor,
    top_k: int,
    workspace: torch.Tensor,
    y: torch.Tensor,
    *,
    logits: Optional[torch.Tensor] = None,
    topk_ids: Optional[torch.Tensor] = None,
    topk_weights: Optional[torch.Tensor] = None,
    softcap: float = 0.0,
    renormalize: bool = True,
    deterministic: bool = False,
    check: bool = False,
) -> None:
    """One stage of ``fused_moe_fp8``, so that an engine can run (and interleave its own work
    between) the stages of a forward pass. Run all of ``MOE_STAGES`` in order -- 'route' (top-k from
    logits; nothing when topk_ids / topk_weights are given), 'layout' (tokens per expert and the tile
    schedule), 'quantize_gather' (x quantized per token per 128 of K, its rows sorted by expert,
    or, where the GEMM gathers them itself, each token once; in atomic mode it also zeroes y),
    'expert_gemm', 'finish' -- with the same arguments each time, the same ``workspace``
    (``fused_moe_workspace``) and the same output ``y`` (bfloat16 or float32 [M, N], which selects
    the output type). y holds the result after 'finish'; in deterministic mode
    it is bitwise ``fused_moe_fp8``'s. Arguments otherwise as ``fused_moe_fp8``.
    ``check``: after the stage, read the routing status the layout and gather stages leave, raising
    ValueError for a topk_ids entry out of range (waits for the GPU; skipped while the stream
    captures). ``fused_moe_workspace_view`` shows the intermediate results.
    """
    _ops.fused_moe_fp8_stage(stage, x, w, w_scales, logits, topk_ids, topk_weights, top_k, workspace, y,
                             softcap=softcap, renormalize=renormalize, deterministic=deterministic, check=check)


def fused_moe_workspace_view(
    workspace: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    top_k: int,
    *,
    deterministic: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> Dict[str, torch.Tensor]:
    """Views into a ``fused_moe_workspace`` (same shape arguments) of what the stages leave there:
    'topk_ids' int32 [M, top_k] and 'topk_weights' float32 [M, top_k] (the route stage's; unused when
    the caller routes), 'counts' int32 [experts] (tokens per expert) and 'offsets' int32
    [experts + 1] (each expert's first sorted row; segments padded to 4 rows) from 'layout',
    'tile_start' int32 [experts + 1], 'xq' float8_e4m3fn [rows, K] and 'x_scales' float32
    [K/128, rows] (the expert-sorted quantized activations; where the GEMM takes the tokens as its
    rows -- 64 or more per expert on average, M * K up to 4 GiB -- it gathers them itself, and the
    first M rows of 'xq' hold each token once, with its scales in the first K/128 * M floats of
    'x_scales' as [K/128, M]), 'row_pair' int32 [rows]
    (token * top_k + slot of each sorted row), 'row_weight' float32 [rows], 'status' int32 [2]
    (error code, first bad routing pair). Plain views: read them on the stream that ran the stages."""
    m, k = x.shape
    experts, n = w.shape[0], w.shape[1]
    total, rows, *off = _ops.fused_moe_workspace_layout(m, n, k, experts, top_k, deterministic=deterministic,
                                                         out_dtype=out_dtype)
    if workspace.dtype != torch.uint8 or workspace.dim() != 1 or not workspace.is_contiguous():
        raise TypeError("lowbit: workspace must be a contiguous uint8 vector (fused_moe_workspace)")
    if workspace.numel() < total:
        raise ValueError(f"lowbit: workspace must hold {total} bytes for this shape, got {workspace.numel()}")
    fields = (("topk_ids", torch.int32, (m, top_k)), ("topk_weights", torch.float32, (m, top_k)),
              ("counts", torch.int32, (experts,)), ("offsets", torch.int32, (experts + 1,)),
              ("tile_start", torch.int32, (experts + 1,)), ("xq", torch.float8_e4m3fn, (rows, k)),
              ("x_scales", torch.float32, (k // 128, rows)), ("row_pair", torch.int32, (rows,)),
              ("row_weight", torch.float32, (rows,)), ("status", torch.int32, (2,)))
    views = {}
    for (name, dtype, shape), start in zip(fields, off):
        size = dtype.itemsize
        for s in shape:
            size *= s
        views[name] = workspace[start:start + size].view(dtype).view(shape)
    return views


def silu_mul_quantize_fp8(gate_up: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The SwiGLU activation fused with per-token FP8 quantization, in one kernel: for
    gate_up = [gate | up] (bfloat16 [M, 2 * I], contiguous, I a multiple of 16, as a merged
    gate/up projection writes it), returns (float8_e4m3fn [M, I], float32 [M] scales) of
    ``silu(gate) * up``: the down projection's input for ``fp8_gemm(q, w_down, a_scale=scales, ...)``.
    The rule is quantize_fp8_per_token's."""
    return _ops.silu_mul_quantize_fp8(gate_up)
