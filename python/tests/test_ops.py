"""torch.ops.lowbit against PyTorch references. CPU tests (import, shapes under fake tensors,
argument errors, the quantizers) run everywhere; GPU tests need a Hopper GPU and skip, saying why,
elsewhere (LOWBIT_REQUIRE_GPU=1 turns the skip into a failure). Fresh random inputs each run,
seed printed (LOWBIT_TEST_SEED replays one)."""

import os
import re
import time

import pytest
import torch
import torch.nn.functional as F

import lowbit

SEED = int(os.environ.get("LOWBIT_TEST_SEED", int(time.time() * 1000) % 1000000007))
print(f"[lowbit] pytest seed {SEED} (set LOWBIT_TEST_SEED to replay)")


def _hopper():
    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"not a Hopper (sm_90) GPU: sm_{major}{minor}"
    return None


_why = _hopper()
if _why and os.environ.get("LOWBIT_REQUIRE_GPU") == "1":
    raise RuntimeError(f"LOWBIT_REQUIRE_GPU=1 but {_why}")
gpu = pytest.mark.skipif(_why is not None, reason=f"GPU tests need a Hopper GPU: {_why}")


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda" if _why is None else "cpu")
    g.manual_seed(SEED)
    return g


def rel_err(got, want):
    got, want = got.double(), want.double()
    assert torch.isfinite(got).all(), "non-finite outputs"
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


# ---------------------------------------------------------------------------------------- CPU


def test_version_matches_the_header():
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "lowbit", "version.h")).read()
    parts = [re.search(rf"LOWBIT_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert lowbit.__version__ == ".".join(parts)


def test_fake_tensor_shapes():
    m = torch.device("meta")
    a = torch.empty(100, 512, dtype=torch.float8_e4m3fn, device=m)
    b = torch.empty(384, 512, dtype=torch.float8_e4m3fn, device=m)
    assert lowbit.fp8_gemm(a, b).shape == (100, 384)
    assert lowbit.fp8_gemm(a, b, out_dtype=torch.float32).dtype == torch.float32
    sfa = torch.empty(4, 100, device=m)
    sfb = torch.empty(3, 4, device=m)
    assert lowbit.fp8_blockscaled_gemm(a, b, sfa, sfb).shape == (100, 384)
    packed = torch.empty(384, 256, dtype=torch.uint8, device=m)
    scales = torch.empty(384, 32, dtype=torch.uint8, device=m)
    pre = lowbit.nvfp4_prepack_weights(packed, scales, 512)
    assert pre.dim() == 1 and pre.dtype == torch.uint8
    assert lowbit.nvfp4_gemm(torch.empty(16, 512, dtype=torch.bfloat16, device=m), pre, 384).shape == (16, 384)
    vals, meta = lowbit.sparse24_compress(torch.empty(128, 512, dtype=torch.float8_e4m3fn, device=m), prune=True)
    assert vals.shape == (128, 256) and meta.dtype == torch.uint8
    assert lowbit.sparse24_gemm(vals, meta, b).shape == (128, 384)
    x = torch.empty(8, 512, dtype=torch.bfloat16, device=m)
    w = torch.empty(16, 256, 512, dtype=torch.float8_e4m3fn, device=m)
    ws = torch.empty(16, 2, 4, device=m)
    logits = torch.empty(8, 16, device=m)
    assert lowbit.fused_moe_fp8(x, w, ws, 2, logits=logits).shape == (8, 256)


def test_compile_sees_the_fake_implementation():
    m = torch.device("meta")
    a = torch.empty(64, 256, dtype=torch.float8_e4m3fn, device=m)
    b = torch.empty(128, 256, dtype=torch.float8_e4m3fn, device=m)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fa, fb = mode.from_tensor(a), mode.from_tensor(b)
        assert torch.ops.lowbit.fp8_gemm(fa, fb).shape == (64, 128)


def test_bad_arguments_raise_with_the_reason():
    m = torch.device("meta")
    a = torch.empty(64, 256, dtype=torch.float8_e4m3fn, device=m)
    b = torch.empty(128, 256, dtype=torch.float8_e4m3fn, device=m)
    with pytest.raises(TypeError, match="a must be"):
        lowbit.fp8_gemm(torch.empty(64, 256, device=m), b)
    with pytest.raises(ValueError, match="K ="):
        lowbit.fp8_gemm(a, torch.empty(128, 128, dtype=torch.float8_e4m3fn, device=m))
    with pytest.raises(ValueError, match="activation"):
        lowbit.fp8_gemm(a, b, activation="relu")
    with pytest.raises(TypeError, match="out_dtype"):
        lowbit.fp8_gemm(a, b, out_dtype=torch.float64)
    with pytest.raises(TypeError, match="out_dtype"):  # FP16 output is fp8_gemm's only
        lowbit.fp8_blockscaled_gemm(a, b, torch.empty(2, 64, device=m), torch.empty(1, 2, device=m),
                                    out_dtype=torch.float16)
    with pytest.raises(ValueError, match="sfa"):
        lowbit.fp8_blockscaled_gemm(a, b, torch.empty(1, 64, device=m), torch.empty(1, 2, device=m))
    with pytest.raises(ValueError, match="topk_ids"):
        x = torch.empty(8, 512, dtype=torch.bfloat16, device=m)
        w = torch.empty(16, 256, 512, dtype=torch.float8_e4m3fn, device=m)
        lowbit.fused_moe_fp8(x, w, torch.empty(16, 2, 4, device=m), 2, topk_ids=torch.empty(8, 2, dtype=torch.int32, device=m))
    with pytest.raises(ValueError, match="NaN"):
        lowbit.quantize_fp8_per_token(torch.tensor([[1.0, float("nan")]]))


def test_fake_rowwise_scales_and_fp16_out():
    m = torch.device("meta")
    b = torch.empty(384, 512, dtype=torch.float8_e4m3fn, device=m)
    for rows in (1, 3, 100):
        a = torch.empty(rows, 512, dtype=torch.float8_e4m3fn, device=m)
        # Per token ([M], [M, 1]) or per tensor (one value; with M = 1 the same as per token).
        for sa in (torch.empty(rows, device=m), torch.empty(rows, 1, device=m), torch.empty(1, device=m), None):
            for sb in (torch.empty(384, device=m), torch.empty(1, 384, device=m), torch.empty(384, 1, device=m),
                       torch.empty((), device=m)):
                out = lowbit.fp8_gemm(a, b, a_scale=sa, b_scale=sb, out_dtype=torch.float16)
                assert out.shape == (rows, 384) and out.dtype == torch.float16
        out = torch.empty(rows, 384, dtype=torch.float16, device=m)
        got = lowbit.fp8_gemm(a, b, a_scale=torch.empty(rows, 1, device=m), b_scale=torch.empty(1, 384, device=m),
                              out=out)
        assert got.shape == (rows, 384) and got.dtype == torch.float16
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fa = mode.from_tensor(torch.empty(129, 512, dtype=torch.float8_e4m3fn, device=m))
        fb = mode.from_tensor(b)
        fsa = mode.from_tensor(torch.empty(129, 1, device=m))
        fsb = mode.from_tensor(torch.empty(1, 384, device=m))
        out = torch.ops.lowbit.fp8_gemm(fa, fb, a_scale=fsa, b_scale=fsb, out_dtype=torch.float16)
        assert out.shape == (129, 384) and out.dtype == torch.float16


def test_bad_rowwise_scales_raise():
    m = torch.device("meta")
    a = torch.empty(64, 256, dtype=torch.float8_e4m3fn, device=m)
    b = torch.empty(128, 256, dtype=torch.float8_e4m3fn, device=m)
    with pytest.raises(ValueError, match=r"a_scale must hold one value \(per tensor\) or M = 64"):
        lowbit.fp8_gemm(a, b, a_scale=torch.empty(63, device=m))
    with pytest.raises(ValueError, match="b_scale must hold one value .* N = 128"):
        lowbit.fp8_gemm(a, b, b_scale=torch.empty(64, device=m))  # M's size on the N side
    with pytest.raises(ValueError, match="a_scale"):
        lowbit.fp8_gemm(a, b, a_scale=torch.empty(1, 64, device=m))  # a row, not a column of tokens
    with pytest.raises(ValueError, match="b_scale"):
        lowbit.fp8_gemm(a, b, b_scale=torch.empty(2, 64, device=m))  # N values, wrong shape
    with pytest.raises(ValueError, match="b_scale"):
        lowbit.fp8_gemm(a, b, out=torch.empty(64, 128, device=m), b_scale=torch.empty(129, device=m))
    with pytest.raises(ValueError, match="contiguous"):
        lowbit.fp8_gemm(a, b, a_scale=torch.empty(64, 2, device=m)[:, 0])
    with pytest.raises(TypeError, match="float32"):
        lowbit.fp8_gemm(a, b, a_scale=torch.empty(64, dtype=torch.bfloat16, device=m))
    with pytest.raises(TypeError, match="out must be"):
        lowbit.fp8_gemm(a, b, out=torch.empty(64, 128, dtype=torch.float64, device=m))
    with pytest.raises(TypeError, match="out_dtype"):  # the other operators keep their output types
        x = torch.empty(8, 512, dtype=torch.bfloat16, device=m)
        w = torch.empty(16, 256, 512, dtype=torch.float8_e4m3fn, device=m)
        lowbit.fused_moe_fp8(x, w, torch.empty(16, 2, 4, device=m), 2, logits=torch.empty(8, 16, device=m),
                             out_dtype=torch.float16)


def _meta_blockscaled_group(m, n, k):
    d = torch.device("meta")
    kb = (k + 127) // 128
    return (torch.empty(m, k, dtype=torch.float8_e4m3fn, device=d), torch.empty(n, k, dtype=torch.float8_e4m3fn, device=d),
            torch.empty(kb, (m + 3) // 4 * 4, device=d), torch.empty((n + 127) // 128, kb, device=d))


def _meta_nvfp4_weights(n, k):
    d = torch.device("meta")
    packed = torch.empty(n, k // 2, dtype=torch.uint8, device=d)
    return lowbit.nvfp4_prepack_weights(packed, torch.empty(n, k // 16, dtype=torch.uint8, device=d), k)


def test_fake_grouped_gemm_shapes():
    shapes = [(0, 256, 512), (1, 384, 1040), (100, 128, 512)]  # an empty group, M = 1, K not a multiple of 128
    a, b, sfa, sfb = zip(*(_meta_blockscaled_group(*s) for s in shapes))
    outs = lowbit.fp8_grouped_gemm(a, b, sfa, sfb)
    assert [tuple(o.shape) for o in outs] == [(m, n) for m, n, _ in shapes]
    assert all(o.dtype == torch.bfloat16 for o in outs)
    assert all(o.dtype == torch.float32 for o in lowbit.fp8_grouped_gemm(a, b, sfa, sfb, out_dtype=torch.float32))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [[mode.from_tensor(t) for t in ts] for ts in (a, b, sfa, sfb)]
        assert [tuple(o.shape) for o in torch.ops.lowbit.fp8_grouped_gemm(*fake)] == [(0, 256), (1, 384), (100, 128)]
    d = torch.device("meta")
    pre = [_meta_nvfp4_weights(n, k) for n, k in ((384, 512), (128, 1024))]
    x = [torch.empty(0, 512, dtype=torch.bfloat16, device=d), torch.empty(1, 1024, dtype=torch.bfloat16, device=d)]
    outs = lowbit.nvfp4_grouped_gemm(x, pre, [384, 128], b_global_scale=[0.5, 2.0])
    assert [tuple(o.shape) for o in outs] == [(0, 384), (1, 128)] and outs[0].dtype == torch.bfloat16
    xq = [torch.empty(5, 256, dtype=torch.uint8, device=d), torch.empty(1, 512, dtype=torch.uint8, device=d)]
    xs = [torch.empty(5, 32, dtype=torch.uint8, device=d), torch.empty(1, 64, dtype=torch.float8_e4m3fn, device=d)]
    outs = lowbit.nvfp4_grouped_gemm(xq, pre, [384, 128], a_scales=xs, a_global_scale=0.1, b_global_scale=2.0)
    assert [tuple(o.shape) for o in outs] == [(5, 384), (1, 128)]


def test_grouped_gemm_bad_arguments_raise():
    a, b, sfa, sfb = (list(t) for t in zip(*(_meta_blockscaled_group(*s) for s in ((0, 256, 512), (1, 384, 512)))))
    with pytest.raises(ValueError, match="groups must be >= 1"):
        lowbit.fp8_grouped_gemm([], [], [], [])
    with pytest.raises(ValueError, match="one entry per group in every list: sfa has 1, a has 2"):
        lowbit.fp8_grouped_gemm(a, b, sfa[:1], sfb)
    with pytest.raises(TypeError, match="group 1: b must be Float8_e4m3fn"):
        lowbit.fp8_grouped_gemm(a, [b[0], b[1].float()], sfa, sfb)
    with pytest.raises(ValueError, match="group 1: sfa must be"):
        lowbit.fp8_grouped_gemm(a, b, [sfa[0], sfa[1][:2]], sfb)
    with pytest.raises(TypeError, match="out_dtype"):
        lowbit.fp8_grouped_gemm(a, b, sfa, sfb, out_dtype=torch.float16)
    # lowbit's own rules, checked on the host before anything launches, name the group.
    bad = _meta_blockscaled_group(8, 392, 512)  # N not a multiple of 16
    with pytest.raises(ValueError, match="fp8_grouped_gemm: group 2: n and k must be positive multiples of 16"):
        lowbit.fp8_grouped_gemm(a + [bad[0]], b + [bad[1]], sfa + [bad[2]], sfb + [bad[3]])
    d = torch.device("meta")
    with pytest.raises(ValueError, match="group 1: sfa_ld must be >= m and a multiple of 4"):
        lowbit.fp8_grouped_gemm(a, b, [sfa[0], torch.empty(4, 1, device=d)], sfb)
    pre = [_meta_nvfp4_weights(384, 512), _meta_nvfp4_weights(128, 512)]
    x = [torch.empty(m, 512, dtype=torch.bfloat16, device=d) for m in (0, 3)]
    xq = [torch.empty(m, 256, dtype=torch.uint8, device=d) for m in (0, 3)]
    xs = [torch.empty(m, 32, dtype=torch.uint8, device=d) for m in (0, 3)]
    with pytest.raises(ValueError, match="groups must be >= 1"):
        lowbit.nvfp4_grouped_gemm([], [], [])
    with pytest.raises(ValueError, match="group 1: b_prepacked must be nvfp4_prepack_weights' output"):
        lowbit.nvfp4_grouped_gemm(x, pre, [384, 256])
    with pytest.raises(ValueError, match="group 0: a_scales go with NVFP4"):
        lowbit.nvfp4_grouped_gemm(xq, pre, [384, 128])
    with pytest.raises(ValueError, match="b_global_scales has 1, a has 2"):
        lowbit.nvfp4_grouped_gemm(x, pre, [384, 128], b_global_scale=[1.0])
    with pytest.raises(ValueError, match="nvfp4_grouped_gemm: group 1: global scales must be finite"):
        lowbit.nvfp4_grouped_gemm(xq, pre, [384, 128], a_scales=xs, a_global_scale=[1.0, float("nan")])


def _meta_moe(m=8, e=16, n=256, k=512):
    d = torch.device("meta")
    return (torch.empty(m, k, dtype=torch.bfloat16, device=d), torch.empty(e, n, k, dtype=torch.float8_e4m3fn, device=d),
            torch.empty(e, (n + 127) // 128, k // 128, device=d), torch.empty(m, e, device=d))


def test_fake_fused_moe_stages():
    x, w, wsc, logits = _meta_moe()
    top_k = 2
    assert lowbit.MOE_STAGES == ("route", "layout", "quantize_gather", "expert_gemm", "finish")
    for det in (False, True):
        for dt in (torch.bfloat16, torch.float32):
            ws = lowbit.fused_moe_workspace(x, w, top_k, deterministic=det, out_dtype=dt)
            assert ws.dtype == torch.uint8 and ws.dim() == 1
            y = torch.empty(8, 256, dtype=dt, device=x.device)
            for stage in lowbit.MOE_STAGES:
                lowbit.fused_moe_fp8_stage(stage, x, w, wsc, top_k, ws, y, logits=logits, deterministic=det)
    view = lowbit.fused_moe_workspace_view(ws, x, w, top_k, deterministic=True, out_dtype=torch.float32)
    rows = view["row_pair"].shape[0]
    assert rows >= 8 * top_k and rows % 4 == 0
    want = {"topk_ids": ((8, 2), torch.int32), "topk_weights": ((8, 2), torch.float32), "counts": ((16,), torch.int32),
            "offsets": ((17,), torch.int32), "tile_start": ((17,), torch.int32), "xq": ((rows, 512), torch.float8_e4m3fn),
            "x_scales": ((4, rows), torch.float32), "row_weight": ((rows,), torch.float32), "status": ((2,), torch.int32)}
    for name, (shape, dtype) in want.items():
        assert tuple(view[name].shape) == shape and view[name].dtype == dtype, name


def test_fused_moe_stage_bad_arguments_raise():
    x, w, wsc, logits = _meta_moe()
    ws = lowbit.fused_moe_workspace(x, w, 2)
    y = torch.empty(8, 256, dtype=torch.bfloat16, device=x.device)
    with pytest.raises(ValueError, match="stage must be 'route', 'layout'"):
        lowbit.fused_moe_fp8_stage("gemm", x, w, wsc, 2, ws, y, logits=logits)
    with pytest.raises(ValueError, match=r"y must be \[M, N\] = \[8, 256\]"):
        lowbit.fused_moe_fp8_stage("layout", x, w, wsc, 2, ws, y[:4], logits=logits)
    with pytest.raises(TypeError, match="y must be bfloat16 or float32"):
        lowbit.fused_moe_fp8_stage("layout", x, w, wsc, 2, ws, y.half(), logits=logits)
    # Sized for atomic mode with BF16 output, not for deterministic mode with FP32 output.
    with pytest.raises(ValueError, match="workspace must hold the .* bytes fused_moe_workspace makes"):
        lowbit.fused_moe_fp8_stage("layout", x, w, wsc, 2, ws, y.float(), logits=logits, deterministic=True)
    with pytest.raises(TypeError, match="workspace must be Byte"):
        lowbit.fused_moe_fp8_stage("layout", x, w, wsc, 2, ws.view(torch.int8), y, logits=logits)
    with pytest.raises(ValueError, match="topk_ids"):
        lowbit.fused_moe_fp8_stage("layout", x, w, wsc, 2, ws, y, topk_ids=torch.empty(8, 2, dtype=torch.int32,
                                                                                        device=x.device))
    with pytest.raises(ValueError, match=r"top_k must be in \[1, min\(experts, 32\)\]"):
        lowbit.fused_moe_workspace(x, w, 33)
    with pytest.raises(ValueError, match="workspace must hold"):
        lowbit.fused_moe_workspace_view(ws[:100], x, w, 2)


def test_quantizers_round_trip():
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(37, 300, generator=g) * 3
    q, s = lowbit.quantize_fp8_per_token(x)
    assert rel_err(q.float() * s[:, None], x) < 0.04
    q, s = lowbit.quantize_fp8_per_tensor(x)
    assert rel_err(q.float() * s, x) < 0.05
    q, sfa = lowbit.quantize_fp8_1x128(x)
    assert sfa.shape == (3, 40)
    deq = q.float().reshape(37, 300) * sfa[:, :37].t().repeat_interleave(128, dim=1)[:, :300]
    assert rel_err(deq, x) < 0.04
    w = torch.randn(200, 300, generator=g)
    q, sfb = lowbit.quantize_fp8_128x128(w)
    assert sfb.shape == (2, 3)
    deq = q.float() * sfb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:200, :300]
    assert rel_err(deq, w) < 0.04
    packed, scales, gs = lowbit.quantize_nvfp4(x[:, :288])
    assert packed.shape == (37, 144) and scales.shape == (37, 18)
    assert rel_err(_dequantize_nvfp4(packed, scales, gs), x[:, :288]) < 0.15


_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _dequantize_nvfp4(packed, scales, gs):
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(packed.shape[0], -1).long()
    mag = _E2M1.to(packed.device)[codes & 7]
    val = torch.where((codes & 8) != 0, -mag, mag)
    s = scales.view(torch.float8_e4m3fn).float().repeat_interleave(16, dim=1)
    return val * s * gs


# ---------------------------------------------------------------------------------------- GPU


def _fp8_pair(m, n, k, gen, scale=1.0):
    a = torch.randn(m, k, device="cuda", generator=gen) * scale
    b = torch.randn(n, k, device="cuda", generator=gen) * scale
    qa, sa = lowbit.quantize_fp8_per_tensor(a)
    qb, sb = lowbit.quantize_fp8_per_tensor(b)
    ref = (qa.double() * sa.double()) @ (qb.double() * sb.double()).T
    return qa, sa, qb, sb, ref


@gpu
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (3, 256, 512), (127, 384, 1024), (129, 2048, 7168), (512, 1024, 256)])
def test_fp8_gemm_matches_reference(m, n, k, gen):
    qa, sa, qb, sb, ref = _fp8_pair(m, n, k, gen)
    out = lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb)
    assert rel_err(out, ref) < 1e-2
    out32 = lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, out_dtype=torch.float32)
    assert rel_err(out32, ref) < 2e-3
    # torch._scaled_mm (cuBLASLt) on the same inputs: within 2x its error.
    base = torch._scaled_mm(qa, qb.T, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    assert rel_err(out32, ref) <= 2 * rel_err(base, ref) + 1e-6


@gpu
def test_fp8_gemm_small_integers_exact(gen):
    m, n, k = 70, 192, 512
    a = torch.randint(-4, 5, (m, k), device="cuda", generator=gen).float()
    b = torch.randint(-4, 5, (n, k), device="cuda", generator=gen).float()
    out = lowbit.fp8_gemm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), out_dtype=torch.float32)
    assert torch.equal(out, a @ b.T)


@gpu
def test_fp8_gemm_epilogues_and_out(gen):
    m, n, k = 96, 512, 1024
    qa, sa, qb, sb, ref = _fp8_pair(m, n, k, gen)
    bias = torch.randn(n, device="cuda", generator=gen).bfloat16()
    res = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
    for act, fn in (("none", lambda t: t), ("gelu", lambda t: F.gelu(t)), ("silu", F.silu)):
        want = fn(ref * 0.5 + bias.double()) + res.double()
        got = lowbit.fp8_gemm(qa, qb, alpha=0.5, a_scale=sa, b_scale=sb, bias=bias, residual=res, activation=act)
        assert rel_err(got, want) < 1e-2, act
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, out=out)
    assert rel_err(out, ref) < 1e-2
    # In place: the residual is the output.
    inplace = res.clone()
    lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, residual=inplace, out=inplace)
    assert rel_err(inplace, ref + res.double()) < 1e-2


@gpu
def test_fp8_gemm_runs_on_the_current_stream_and_in_graphs(gen):
    qa, sa, qb, sb, ref = _fp8_pair(64, 1024, 2048, gen)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(s):
        out = lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb)
    s.synchronize()
    assert rel_err(out, ref) < 1e-2
    # Captured (torch's default, global capture mode) on a stream that ran the call before, so
    # its split-K workspace exists; replayed with new inputs in the same buffers.
    static_out = torch.empty(64, 1024, device="cuda", dtype=torch.bfloat16)
    gs = torch.cuda.Stream()
    gs.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(gs):
        lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, out=static_out)
    gs.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=gs):
        lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, out=static_out)
    qa2, sa2, _, _, _ = _fp8_pair(64, 1024, 2048, gen)
    qa.copy_(qa2)
    sa.copy_(sa2)
    graph.replay()
    torch.cuda.synchronize()
    want = (qa.double() * sa.double()) @ (qb.double() * sb.double()).T
    assert rel_err(static_out, want) < 1e-2


@gpu
def test_fp8_gemm_under_torch_compile(gen):
    qa, sa, qb, sb, ref = _fp8_pair(32, 512, 1024, gen)
    f = torch.compile(lambda a, b, x, y: lowbit.fp8_gemm(a, b, a_scale=x, b_scale=y), fullgraph=True)
    assert rel_err(f(qa, qb, sa, sb), ref) < 1e-2


def _rowwise_pair(m, n, k, gen):
    # Rows of different magnitudes, so that a scale applied to the wrong row or column shows.
    a = torch.randn(m, k, device="cuda", generator=gen) * (torch.rand(m, 1, device="cuda", generator=gen) * 4 + 0.1)
    b = torch.randn(n, k, device="cuda", generator=gen) * (torch.rand(n, 1, device="cuda", generator=gen) + 0.01)
    qa, sa = lowbit.quantize_fp8_per_token(a)
    qb, sb = lowbit.quantize_fp8_per_token(b)  # per output channel
    ref = (qa.double() * sa.double()[:, None]) @ (qb.double() * sb.double()[:, None]).T
    return qa, sa, qb, sb, ref


@gpu
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (3, 256, 512), (129, 4096, 1024), (512, 1024, 2048)])
def test_fp8_gemm_rowwise_matches_scaled_mm(m, n, k, gen):
    qa, sa, qb, sb, ref = _rowwise_pair(m, n, k, gen)
    # torch._scaled_mm's rowwise form (M = 1: one value, which lowbit takes as per tensor).
    scale_a, scale_b = sa[:, None].contiguous(), sb[None, :].contiguous()
    out = lowbit.fp8_gemm(qa, qb, a_scale=scale_a, b_scale=scale_b)
    base = torch._scaled_mm(qa, qb.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert rel_err(out, ref) < 1e-2
    assert rel_err(out, ref) <= 2 * rel_err(base, ref) + 1e-6
    assert rel_err(out, base) < 1e-2
    out32 = lowbit.fp8_gemm(qa, qb, a_scale=scale_a, b_scale=scale_b, out_dtype=torch.float32)
    assert rel_err(out32, ref) < 2e-3
    # The other accepted shapes of the same scales run the same GEMM.
    for fa, fb in ((sa, sb), (scale_a, sb[:, None].contiguous())):
        assert torch.equal(lowbit.fp8_gemm(qa, qb, a_scale=fa, b_scale=fb), out)


@gpu
@pytest.mark.parametrize("m", [1, 3, 129])
def test_fp8_gemm_rowwise_bias_and_fp16_out(m, gen):
    n, k = 1024, 2048
    qa, sa, qb, sb, ref = _rowwise_pair(m, n, k, gen)
    bias = torch.randn(n, device="cuda", generator=gen).bfloat16()
    want = ref * 0.5 + bias.double()
    got = lowbit.fp8_gemm(qa, qb, alpha=0.5, a_scale=sa, b_scale=sb, bias=bias)
    assert rel_err(got, want) < 1e-2
    got32 = lowbit.fp8_gemm(qa, qb, alpha=0.5, a_scale=sa, b_scale=sb, bias=bias, out_dtype=torch.float32)
    assert rel_err(got32, want) < 2e-3
    # FP16 rounds 8x finer than BF16.
    half = lowbit.fp8_gemm(qa, qb, alpha=0.5, a_scale=sa, b_scale=sb, bias=bias, out_dtype=torch.float16)
    assert half.dtype == torch.float16
    assert rel_err(half, want) < 2e-3
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    lowbit.fp8_gemm(qa, qb, a_scale=sa[:, None], b_scale=sb, out=out)
    assert rel_err(out, ref) < 2e-3
    # FP16 with per-tensor scales (the plain epilogue), and per-row scales on one side only.
    qa1, sa1, qb1, sb1, ref1 = _fp8_pair(m, n, k, gen)
    assert rel_err(lowbit.fp8_gemm(qa1, qb1, a_scale=sa1, b_scale=sb1, out_dtype=torch.float16), ref1) < 2e-3
    mixed = lowbit.fp8_gemm(qa, qb1, a_scale=sa, b_scale=sb1, out_dtype=torch.float32)
    assert rel_err(mixed, (qa.double() * sa.double()[:, None]) @ (qb1.double() * sb1.double()).T) < 2e-3


@gpu
@pytest.mark.parametrize("m", [1, 3, 129, 700])
def test_fp8_gemm_rowwise_residual_in_place(m, gen):
    # The Llama layer's o_proj and down_proj: per-token x per-channel scales with the residual
    # added in the epilogue, written over the residual itself.
    n, k = 4096, 1024
    qa, sa, qb, sb, ref = _rowwise_pair(m, n, k, gen)
    res = torch.randn(m, n, device="cuda", generator=gen).bfloat16()
    want = ref + res.double()
    assert rel_err(lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, residual=res), want) < 1e-2
    bias = torch.randn(n, device="cuda", generator=gen).bfloat16()
    got32 = lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, bias=bias, residual=res, out_dtype=torch.float32)
    assert rel_err(got32, want + bias.double()) < 2e-3
    half = lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, residual=res, out_dtype=torch.float16)
    assert rel_err(half, want) < 2e-3
    inplace = res.clone()
    lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, residual=inplace, out=inplace)
    assert rel_err(inplace, want) < 1e-2
    # The residual where torch would add it: the same values to BF16 rounding.
    unfused = (lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, out_dtype=torch.float32) + res.float()).bfloat16()
    assert rel_err(inplace, unfused.double()) < 1e-2
    with pytest.raises(ValueError, match="activation"):
        lowbit.fp8_gemm(qa, qb, a_scale=sa, b_scale=sb, residual=res, activation="silu")


def test_fake_quantize_shapes():
    m = torch.device("meta")
    q, s = torch.ops.lowbit.quantize_fp8_per_token(torch.empty(5, 64, dtype=torch.bfloat16, device=m))
    assert q.shape == (5, 64) and q.dtype == torch.float8_e4m3fn and s.shape == (5,) and s.dtype == torch.float32
    q, s = lowbit.silu_mul_quantize_fp8(torch.empty(5, 96, dtype=torch.bfloat16, device=m))
    assert q.shape == (5, 48) and s.shape == (5,)
    with pytest.raises(ValueError, match="gate_up must be"):
        lowbit.silu_mul_quantize_fp8(torch.empty(5, 33, dtype=torch.bfloat16, device=m))
    with pytest.raises(TypeError, match="must be"):
        lowbit.silu_mul_quantize_fp8(torch.empty(5, 64, device=m))


@gpu
@pytest.mark.parametrize("m,k", [(1, 16), (3, 4096), (129, 14336)])
def test_quantize_per_token_kernel_matches_the_torch_rule(m, k, gen):
    x = (torch.randn(m, k, device="cuda", generator=gen) * 3).to(torch.bfloat16)
    x[0, :] = 0  # a zero row: scale 1
    q, s = lowbit.quantize_fp8_per_token(x)  # lowbit's kernel (CUDA, BF16, K % 16 == 0)
    qt, st = lowbit.quantize_fp8_per_token(x.float())  # the same rule in PyTorch
    assert torch.equal(s, st)
    assert torch.equal(q.view(torch.uint8), qt.view(torch.uint8))
    bad = x.clone()
    bad[m - 1, k // 2] = float("nan")
    q, s = lowbit.quantize_fp8_per_token(bad)
    assert torch.isnan(s[m - 1]) and torch.isnan(q[m - 1].float()).all()


@gpu
@pytest.mark.parametrize("m,inter", [(1, 16), (7, 1024), (64, 14336)])
def test_silu_mul_quantize_matches_reference(m, inter, gen):
    gu = torch.randn(m, 2 * inter, device="cuda", generator=gen).to(torch.bfloat16)
    q, s = lowbit.silu_mul_quantize_fp8(gu)
    g, u = gu.double().chunk(2, dim=1)
    want = torch.nn.functional.silu(g) * u
    amax = want.abs().amax(dim=1)
    torch.testing.assert_close(s.double(), amax / 448, rtol=1e-5, atol=0)
    # Half an E4M3 step: 1/16 of the value, or 2^-10 of the scale where the codes are subnormal.
    err = (q.double() * s.double()[:, None] - want).abs()
    assert bool((err <= want.abs() / 16 * 1.01 + s.double()[:, None] * 2 ** -10 * 1.01).all())


def _blockscaled_operands(m, n, k, gen):
    """E4M3 operands with their block scales (quantize_fp8_1x128, quantize_fp8_128x128) and the
    FP64 product of their dequantized values."""
    qa, sfa = lowbit.quantize_fp8_1x128(torch.randn(m, k, device="cuda", generator=gen))
    qb, sfb = lowbit.quantize_fp8_128x128(torch.randn(n, k, device="cuda", generator=gen))
    da = qa.double() * sfa[:, :m].t().double().repeat_interleave(128, 1)[:, :k]
    db = qb.double() * sfb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
    return qa, qb, sfa, sfb, da @ db.T


@gpu
@pytest.mark.parametrize("m,n,k", [(1, 2112, 7168), (64, 4096, 7168), (100, 384, 1040), (4096, 1024, 512)])
def test_fp8_blockscaled_gemm_matches_reference(m, n, k, gen):
    qa, qb, sfa, sfb, ref = _blockscaled_operands(m, n, k, gen)
    assert sfa.shape[0] == (k + 127) // 128
    out = lowbit.fp8_blockscaled_gemm(qa, qb, sfa, sfb, out_dtype=torch.float32)
    assert rel_err(out, ref) < 2e-3


# Empty groups, M = 1 groups, K not a multiple of 128, groups of different N and K.
_GROUPED_SHAPES = [(0, 256, 512), (1, 2112, 7168), (100, 384, 1040), (1, 256, 512), (0, 128, 128), (129, 4096, 1024),
                   (300, 512, 2048)]


@gpu
@pytest.mark.parametrize("out_dtype,tol", [(torch.float32, 2e-3), (torch.bfloat16, 1e-2)])
def test_fp8_grouped_gemm_matches_reference(out_dtype, tol, gen):
    groups = [_blockscaled_operands(m, n, k, gen) for m, n, k in _GROUPED_SHAPES]
    qa, qb, sfa, sfb, refs = zip(*groups)
    outs = lowbit.fp8_grouped_gemm(qa, qb, sfa, sfb, out_dtype=out_dtype, check=True)
    for (m, n, _), out, ref in zip(_GROUPED_SHAPES, outs, refs):
        assert out.shape == (m, n) and out.dtype == out_dtype
        if m:
            assert rel_err(out, ref) < tol, (m, n)
    # The dense call on each group: the same accuracy.
    dense = lowbit.fp8_blockscaled_gemm(qa[5], qb[5], sfa[5], sfb[5], out_dtype=out_dtype)
    assert rel_err(outs[5], dense) < tol


@gpu
@pytest.mark.parametrize("out_dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 2e-3)])
def test_fp8_grouped_gemm_masked_matches_reference(out_dtype, tol, gen):
    g, max_m, n, k = 4, 96, 384, 1024
    ops = [_blockscaled_operands(max_m, n, k, gen) for _ in range(g)]
    qa, qb, sfa, sfb, refs = zip(*ops)
    a, b, sa, sb = torch.stack(qa), torch.stack(qb), torch.stack(sfa), torch.stack(sfb)
    counts = [0, 1, 37, 96]
    masked = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = lowbit.fp8_grouped_gemm_masked(a, b, sa, sb, masked, out_dtype=out_dtype, check=True)
    assert out.shape == (g, max_m, n) and out.dtype == out_dtype
    for i, c in enumerate(counts):
        if c:
            assert rel_err(out[i, :c], refs[i][:c]) < tol, i
    # Rows past the counts are left alone: a poisoned output keeps its NaNs there.
    with torch.cuda.graph(graph := torch.cuda.CUDAGraph()):
        captured = lowbit.fp8_grouped_gemm_masked(a, b, sa, sb, masked, out_dtype=out_dtype)
    captured.fill_(float("nan"))
    masked.copy_(torch.tensor([96, 5, 0, 2], dtype=torch.int32))  # the next step's routing
    graph.replay()
    torch.cuda.synchronize()
    for i, c in enumerate([96, 5, 0, 2]):
        if c:
            assert rel_err(captured[i, :c], refs[i][:c]) < tol, i
        assert torch.isnan(captured[i, c:]).all(), i
    bad = torch.tensor([0, -1, 97, 3], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="group 1"):
        lowbit.fp8_grouped_gemm_masked(a, b, sa, sb, bad, check=True)
    with pytest.raises(ValueError, match="masked_m"):
        lowbit.fp8_grouped_gemm_masked(a, b, sa, sb, masked[:3])


@gpu
@pytest.mark.parametrize("out_dtype,tol", [(torch.bfloat16, 1e-2), (torch.float32, 2e-3)])
def test_fp8_grouped_gemm_contiguous_matches_reference(out_dtype, tol, gen):
    sizes, n, k = [32, 0, 4, 60, 37], 384, 1024  # starts 0, 32, 32, 36, 96: multiples of 4
    offsets = [0]
    for m in sizes:
        offsets.append(offsets[-1] + m)
    rows = offsets[-1] + 3  # three rows no group owns
    qa, sfa = lowbit.quantize_fp8_1x128(torch.randn(rows, k, device="cuda", generator=gen))
    da = qa.double() * sfa[:, :rows].t().double().repeat_interleave(128, 1)[:, :k]
    ws = [lowbit.quantize_fp8_128x128(torch.randn(n, k, device="cuda", generator=gen)) for _ in sizes]
    b, sb = torch.stack([q for q, _ in ws]), torch.stack([s for _, s in ws])
    db = [q.double() * s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k] for q, s in ws]
    offs = torch.tensor(offsets, dtype=torch.int32, device="cuda")
    out = lowbit.fp8_grouped_gemm_contiguous(qa, b, sfa, sb, offs, out_dtype=out_dtype, check=True)
    assert out.shape == (rows, n) and out.dtype == out_dtype
    for g, m in enumerate(sizes):
        lo, hi = offsets[g], offsets[g + 1]
        if m:
            assert rel_err(out[lo:hi], da[lo:hi] @ db[g].T) < tol, g
    # Captured once, replayed with new offsets: rows past the last group keep their NaNs.
    with torch.cuda.graph(graph := torch.cuda.CUDAGraph()):
        captured = lowbit.fp8_grouped_gemm_contiguous(qa, b, sfa, sb, offs, out_dtype=out_dtype)
    captured.fill_(float("nan"))
    offs.copy_(torch.tensor([0, 8, 8, 12, 40, 41], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    for g, (lo, hi) in enumerate(zip([0, 8, 8, 12, 40], [8, 8, 12, 40, 41])):
        if hi > lo:
            assert rel_err(captured[lo:hi], da[lo:hi] @ db[g].T) < tol, g
    assert torch.isnan(captured[41:]).all()
    bad = torch.tensor([0, 32, 32, 34, 96, 133], dtype=torch.int32, device="cuda")  # group 3 starts on row 34
    with pytest.raises(ValueError, match="group 3"):
        lowbit.fp8_grouped_gemm_contiguous(qa, b, sfa, sb, bad, check=True)
    with pytest.raises(ValueError, match="offsets"):
        lowbit.fp8_grouped_gemm_contiguous(qa, b, sfa, sb, offs[:5])


@gpu
def test_grouped_gemm_in_cuda_graphs(gen):
    shapes = [(0, 256, 512), (1, 384, 1024), (64, 256, 512)]
    qa, qb, sfa, sfb, _ = (list(t) for t in zip(*(_blockscaled_operands(m, n, k, gen) for m, n, k in shapes)))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: the captured call's first run is not under capture
        lowbit.fp8_grouped_gemm(qa, qb, sfa, sfb, out_dtype=torch.float32)
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        outs = lowbit.fp8_grouped_gemm(qa, qb, sfa, sfb, out_dtype=torch.float32, check=True)  # check: skipped
    # Calls in between, eager and captured, must leave the graph's descriptors alone.
    other = [_blockscaled_operands(m, n, k, gen) for m, n, k in ((32, 128, 256), (16, 256, 512))]
    oa, ob, osfa, osfb, _ = zip(*other)
    for _ in range(3):
        lowbit.fp8_grouped_gemm(oa, ob, osfa, osfb)
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph2, stream=s):
        lowbit.fp8_grouped_gemm(oa, ob, osfa, osfb)
    # New inputs in the captured buffers.
    for g, (m, n, k) in enumerate(shapes):
        na, _, nsfa, _, _ = _blockscaled_operands(m, n, k, gen)
        qa[g].copy_(na)
        sfa[g].copy_(nsfa)
    graph2.replay()
    graph.replay()
    torch.cuda.synchronize()
    for g, (m, n, k) in enumerate(shapes):
        want = lowbit.fp8_blockscaled_gemm(qa[g], qb[g], sfa[g], sfb[g], out_dtype=torch.float32)
        assert outs[g].shape == want.shape == (m, n)  # M = 0: both empty
        if m:
            assert rel_err(outs[g], want) < 2e-3


@gpu
@pytest.mark.parametrize("fp4_act", [False, True])
def test_nvfp4_gemm_matches_reference(fp4_act, gen):
    m, n, k = 16, 512, 1024
    w = torch.randn(n, k, device="cuda", generator=gen)
    wp, ws, wg = lowbit.quantize_nvfp4(w)
    pre = lowbit.nvfp4_prepack_weights(wp, ws, k)
    wd = _dequantize_nvfp4(wp, ws, wg).double()
    x = torch.randn(m, k, device="cuda", generator=gen)
    if fp4_act:
        xp, xs, xg = lowbit.quantize_nvfp4(x)
        out = lowbit.nvfp4_gemm(xp, pre, n, a_scales=xs, a_global_scale=xg, b_global_scale=wg)
        ref = _dequantize_nvfp4(xp, xs, xg).double() @ wd.T
    else:
        xb = x.bfloat16()
        out = lowbit.nvfp4_gemm(xb, pre, n, b_global_scale=wg)
        ref = xb.double() @ wd.T
    assert rel_err(out, ref) < 1e-2



@gpu
@pytest.mark.parametrize("fp4_act", [False, True])
def test_nvfp4_grouped_gemm_matches_reference(fp4_act, gen):
    shapes = [(0, 512, 1024), (1, 256, 512), (16, 512, 1024), (1, 128, 4096), (100, 384, 2048), (0, 128, 64)]
    a, a_scales, a_gs, pre, b_gs, refs = [], [], [], [], [], []
    for m, n, k in shapes:
        wp, ws, wg = lowbit.quantize_nvfp4(torch.randn(n, k, device="cuda", generator=gen))
        pre.append(lowbit.nvfp4_prepack_weights(wp, ws, k))
        b_gs.append(wg)
        x = torch.randn(m, k, device="cuda", generator=gen)
        if fp4_act:
            xp, xs, xg = lowbit.quantize_nvfp4(x)
            a.append(xp)
            a_scales.append(xs)
            a_gs.append(xg)
            xd = _dequantize_nvfp4(xp, xs, xg).double() if m else None
        else:
            a.append(x.bfloat16())
            xd = a[-1].double()
        refs.append(xd @ _dequantize_nvfp4(wp, ws, wg).double().T if m else None)
    outs = lowbit.nvfp4_grouped_gemm(a, pre, [n for _, n, _ in shapes], a_scales=a_scales if fp4_act else None,
                                     a_global_scale=a_gs if fp4_act else None, b_global_scale=b_gs, check=True)
    for (m, n, _), out, ref in zip(shapes, outs, refs):
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        if m:
            assert rel_err(out, ref) < 1e-2, (m, n)

@gpu
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float16])
def test_sparse24_gemm_matches_reference(dtype, gen):
    m, n, k = 256, 384, 512
    a = torch.randn(m, k, device="cuda", generator=gen)
    keep = torch.rand(m, k // 4, 4, device="cuda", generator=gen).argsort(dim=2)[:, :, :2]
    mask = torch.zeros(m, k // 4, 4, device="cuda").scatter_(2, keep, 1.0).reshape(m, k)
    a = (a * mask).to(dtype)
    b = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
    vals, meta = lowbit.sparse24_compress(a)
    out = lowbit.sparse24_gemm(vals, meta, b)
    ref = a.double() @ b.double().T
    assert rel_err(out, ref) < 1e-2
    dense = torch.ones(m, k, device="cuda").to(dtype)
    with pytest.raises(ValueError, match="not 2:4 sparse"):
        lowbit.sparse24_compress(dense)
    vals, meta = lowbit.sparse24_compress(dense, prune=True)  # keeps two of every four


@gpu
def test_patch_embed_matches_reference(gen):
    p, n, k = 196, 256, 768
    patches = torch.randn(2 * p, k, device="cuda", generator=gen)
    weight = torch.randn(n, k, device="cuda", generator=gen) * 0.05
    qp, sp = lowbit.quantize_fp8_per_tensor(patches)
    qw, sw = lowbit.quantize_fp8_per_tensor(weight)
    bias = torch.randn(n, device="cuda", generator=gen).bfloat16()
    pos = torch.randn(p, n, device="cuda", generator=gen).bfloat16()
    out = lowbit.patch_embed_fp8(qp, qw, bias, pos, patches_scale=sp, weight_scale=sw)
    ref = (qp.double() * sp.double()) @ (qw.double() * sw.double()).T + bias.double() + pos.double().repeat(2, 1)
    assert rel_err(out, ref) < 1e-2


def _moe_weights(e, n, k, gen):
    w = torch.randn(e, n, k, device="cuda", generator=gen)
    wq, wsc = zip(*(lowbit.quantize_fp8_128x128(w[i]) for i in range(e)))
    return torch.stack(wq), torch.stack(wsc)


def _moe_routing(m, e, top_k, gen):
    ids = torch.stack([torch.randperm(e, device="cuda", generator=gen)[:top_k] for _ in range(m)]).int()
    return ids.reshape(m, top_k), torch.rand(m, top_k, device="cuda", generator=gen)


def _moe_reference(x, wq, wsc, ids, wts):
    m, k = x.shape
    n = wq.shape[1]
    xq, sfa = lowbit.quantize_fp8_1x128(x.float())
    xd = xq.double() * sfa[:, :m].t().double().repeat_interleave(128, 1)
    wd = wq.double() * wsc.double().repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :n, :k]
    ref = torch.zeros(m, n, dtype=torch.float64, device="cuda")
    for j in range(ids.shape[1]):
        ref += wts[:, j, None].double() * torch.einsum("mk,mnk->mn", xd, wd[ids[:, j].long()])
    return ref


@gpu
@pytest.mark.parametrize("m", [1, 16, 200])
def test_fused_moe_matches_reference(m, gen):
    e, top_k, n, k = 16, 4, 256, 512
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    wq, wsc = _moe_weights(e, n, k, gen)
    ids, wts = _moe_routing(m, e, top_k, gen)
    y = lowbit.fused_moe_fp8(x, wq, wsc, top_k, topk_ids=ids, topk_weights=wts, out_dtype=torch.float32,
                             deterministic=True)
    assert rel_err(y, _moe_reference(x, wq, wsc, ids, wts)) < 2e-3
    # Routing from logits: the same as torch's softmax + top-k + renormalization.
    logits = torch.randn(m, e, device="cuda", generator=gen)
    y2 = lowbit.fused_moe_fp8(x, wq, wsc, top_k, logits=logits, out_dtype=torch.float32)
    p = logits.softmax(-1)
    tw, ti = p.topk(top_k, dim=-1)
    tw = tw / tw.sum(-1, keepdim=True)
    y3 = lowbit.fused_moe_fp8(x, wq, wsc, top_k, topk_ids=ti.int(), topk_weights=tw, out_dtype=torch.float32)
    assert rel_err(y2, y3) < 1e-5


def _moe_stages(x, wq, wsc, top_k, y, **kw):
    ws = lowbit.fused_moe_workspace(x, wq, top_k, deterministic=kw.get("deterministic", False), out_dtype=y.dtype)
    for stage in lowbit.MOE_STAGES:
        lowbit.fused_moe_fp8_stage(stage, x, wq, wsc, top_k, ws, y, **kw)
    return ws


@gpu
@pytest.mark.parametrize("m", [0, 1, 16, 200])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_fused_moe_stages_match_the_fused_call(m, out_dtype, gen):
    e, top_k, n, k = 16, 4, 256, 512
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    wq, wsc = _moe_weights(e, n, k, gen)
    logits = torch.randn(m, e, device="cuda", generator=gen)
    want = lowbit.fused_moe_fp8(x, wq, wsc, top_k, logits=logits, deterministic=True, out_dtype=out_dtype)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    ws = _moe_stages(x, wq, wsc, top_k, y, logits=logits, deterministic=True, check=True)
    assert torch.equal(y, want)  # deterministic mode: bitwise
    # What the route and layout stages left: torch's softmax + top-k, renormalized, and its histogram.
    view = lowbit.fused_moe_workspace_view(ws, x, wq, top_k, deterministic=True, out_dtype=out_dtype)
    tw, ti = logits.softmax(-1).topk(top_k, dim=-1)
    tw = tw / tw.sum(-1, keepdim=True)
    dense = torch.zeros(m, e, device="cuda")
    got = dense.scatter(1, view["topk_ids"].long(), view["topk_weights"])
    torch.testing.assert_close(got, dense.scatter(1, ti, tw), rtol=1e-5, atol=1e-6)
    assert torch.equal(view["counts"], torch.bincount(ti.flatten(), minlength=e).int())
    assert view["status"].tolist() == ([0, -1] if m else [0, 0])


@gpu
@pytest.mark.parametrize("m", [2, 40])  # 2: fused_moe_fp8 takes its tiny-batch path, which has no stages
def test_fused_moe_stages_with_own_routing(m, gen):
    e, top_k, n, k = 16, 4, 256, 512
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    wq, wsc = _moe_weights(e, n, k, gen)
    ids, wts = _moe_routing(m, e, top_k, gen)
    ref = _moe_reference(x, wq, wsc, ids, wts)
    for out_dtype, tol in ((torch.float32, 2e-3), (torch.bfloat16, 1e-2)):  # atomic mode
        y = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        _moe_stages(x, wq, wsc, top_k, y, topk_ids=ids, topk_weights=wts, check=True)
        assert rel_err(y, ref) < tol
    bad = ids.clone()
    bad[1, 2] = e
    ws = lowbit.fused_moe_workspace(x, wq, top_k, out_dtype=torch.float32)
    y = torch.empty(m, n, device="cuda")
    lowbit.fused_moe_fp8_stage("route", x, wq, wsc, top_k, ws, y, topk_ids=bad, topk_weights=wts)
    with pytest.raises(ValueError, match=r"routing pair 6 \(token 1, slot 2\): expert id out of range"):
        lowbit.fused_moe_fp8_stage("layout", x, wq, wsc, top_k, ws, y, topk_ids=bad, topk_weights=wts, check=True)


@gpu
def test_host_tensors_and_mismatched_devices_are_refused(gen):
    qa, sa, qb, sb, _ = _fp8_pair(64, 256, 512, gen)
    with pytest.raises(TypeError, match="CUDA tensor"):
        lowbit.fp8_gemm(qa.cpu(), qb)
    with pytest.raises(TypeError, match="CUDA tensor"):
        lowbit.fp8_gemm(qa, qb, a_scale=sa.cpu())


@gpu
def test_empty_batches_give_empty_outputs(gen):
    """An engine's batch can be empty (no tokens routed, a drained queue): the ops return [0, N]."""
    b = torch.randn(256, 512, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    a = torch.empty(0, 512, device="cuda", dtype=torch.float8_e4m3fn)
    assert lowbit.fp8_gemm(a, b).shape == (0, 256)
    assert lowbit.fp8_gemm(a, b, a_scale=torch.ones(1, device="cuda"), b_scale=torch.ones(256, device="cuda")).shape == (0, 256)
    qb, sfb = lowbit.quantize_fp8_128x128(torch.randn(256, 512, device="cuda", generator=gen))
    assert lowbit.fp8_blockscaled_gemm(a, qb, torch.empty(4, 0, device="cuda"), sfb).shape == (0, 256)
