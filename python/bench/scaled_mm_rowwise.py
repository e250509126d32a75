#!/usr/bin/env python3
"""torch._scaled_mm with rowwise scales (per-token x per-channel FP8, BF16 out: what PyTorch
users call for FP8 linears) against torch.ops.lowbit.fp8_gemm with the same scales, on the same
inputs, over the W1 shapes.

Each operator is captured as a CUDA graph of back-to-back launches and replayed after a warm-up;
the two graphs' replays alternate, so clock and thermal drift fall on both alike. A replay is
timed with CUDA events; a launch's time is the median replay over the launches in it. The inputs
rotate over enough copies that more than twice the L2 passes between two uses of one, so neither
operator reads its operands from the previous launch's L2. lowbit's output on the first copy is
checked against _scaled_mm's (relative Frobenius error).

    PYTHONPATH=<build>/python python python/bench/scaled_mm_rowwise.py [--shape MxNxK]... [--json FILE]
"""

import argparse
import json
import math
import statistics
import sys

import torch

try:
    import lowbit
except ImportError as e:  # reported in main, after the GPU check
    lowbit, LOWBIT_IMPORT_ERROR = None, e

W1_SHAPES = [(m, n, k) for m in (64, 128, 4096)
             for n, k in ((2112, 7168), (4096, 7168), (7168, 16384), (7168, 2048), (24576, 1536), (32768, 512))]
W1_SHAPES += [(4096, 8192, 8192), (8192, 8192, 8192)]
# Both accumulate in FP32 and round to BF16: they differ by a BF16 step in a few outputs (~1e-5
# on an H100). A wrong scale or tile shows as 1e-1 and more.
MAX_REL_ERR = 1e-2
# Replays of about this long make the events' overhead negligible (sized from eager calls, whose
# launch overhead makes them somewhat shorter for the smallest shapes).
REPLAY_US = 2000.0


def die(message):
    print(f"scaled_mm_rowwise: {message}", file=sys.stderr)
    sys.exit(1)


def parse_shape(text):
    try:
        m, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad shape {text!r} (want MxNxK)")
    return m, n, k


class Inputs:
    """One copy of the operands: E4M3 a [M, K] and b [N, K] with _scaled_mm's rowwise scales."""

    def __init__(self, m, n, k, gen):
        a = torch.randn(m, k, device="cuda", generator=gen)
        b = torch.randn(n, k, device="cuda", generator=gen) * 0.02
        self.a, sa = lowbit.quantize_fp8_per_token(a)
        self.b, sb = lowbit.quantize_fp8_per_token(b)
        self.bt = self.b.t()  # column-major [K, N], as _scaled_mm wants its second operand
        self.scale_a = sa[:, None].contiguous()  # [M, 1]
        self.scale_b = sb[None, :].contiguous()  # [1, N]


def run_torch(x):
    return torch._scaled_mm(x.a, x.bt, scale_a=x.scale_a, scale_b=x.scale_b, out_dtype=torch.bfloat16)


def run_lowbit(x):
    return torch.ops.lowbit.fp8_gemm(x.a, x.b, a_scale=x.scale_a, b_scale=x.scale_b)


def time_shape(m, n, k, args, l2_bytes, stream):
    footprint = m * k + n * k + 4 * (m + n)
    # Between two uses of a copy the other (copies - 1) pass through: at least 2x the L2.
    copies = min(args.max_copies, max(2, math.ceil(2 * l2_bytes / footprint) + 1))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    inputs = [Inputs(m, n, k, gen) for _ in range(copies)]
    ops = (run_torch, run_lowbit)
    with torch.cuda.stream(stream):
        # Eager first, on the stream the graphs capture on: cuBLASLt's workspace and lowbit's
        # split-K workspace (one per stream) exist before the capture.
        want, got = run_torch(inputs[0]), run_lowbit(inputs[0])
        err = ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()
        del want, got
        eager_us = []
        for op in ops:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for i in range(2 * copies):
                op(inputs[i % copies])
            end.record(stream)
            end.synchronize()
            eager_us.append(start.elapsed_time(end) * 1e3 / (2 * copies))
    # Whole rounds of the copies per replay, so the rotation holds across replays too.
    launches = min(400, max(3, math.ceil(REPLAY_US / min(eager_us))))
    launches = math.ceil(launches / copies) * copies
    graphs = []
    for op in ops:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for i in range(launches):
                op(inputs[i % copies])
        graphs.append(g)
    with torch.cuda.stream(stream):
        for _ in range(args.warmup):
            for g in graphs:
                g.replay()
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                   for _ in range(args.replays)] for _ in graphs]
        for r in range(args.replays):
            for g, ev in zip(graphs, events):
                ev[r][0].record(stream)
                g.replay()
                ev[r][1].record(stream)
    stream.synchronize()
    torch_us, lowbit_us = (statistics.median(s.elapsed_time(e) for s, e in ev) * 1e3 / launches for ev in events)
    ok = math.isfinite(err) and err <= MAX_REL_ERR
    return {"m": m, "n": n, "k": k, "torch_us": torch_us, "lowbit_us": lowbit_us, "x_torch": torch_us / lowbit_us,
            "rel_err": err, "copies": copies, "launches": launches,
            "status": "ok" if ok else f"FAIL: error {err:.3g} above {MAX_REL_ERR}"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", type=parse_shape, action="append", help="MxNxK (repeatable; default: the W1 shapes)")
    p.add_argument("--replays", type=int, default=100, help="timed replays of each graph (>= 50)")
    p.add_argument("--warmup", type=int, default=10, help="untimed replays of each graph first")
    p.add_argument("--max-copies", type=int, default=64, help="most input copies rotated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    if args.replays < 50:
        p.error(f"--replays must be >= 50 (got {args.replays})")

    if not torch.cuda.is_available():
        die("no CUDA GPU visible to PyTorch; nothing was measured")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        die(f"lowbit needs a Hopper (sm_90) GPU, this is sm_{cap[0]}{cap[1]}; nothing was measured")
    if lowbit is None:
        die(f"cannot import lowbit ({LOWBIT_IMPORT_ERROR}); put the build's package on the path: "
            "PYTHONPATH=<build>/python")

    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 50 << 20)
    print(f"{props.name}, L2 {l2_bytes >> 20} MB; torch {torch.__version__}, lowbit {lowbit.__version__}; "
          f"medians of {args.replays} graph replays, rowwise scales, BF16 out")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    results = []
    print(f"{'shape':>16} | {'torch µs':>9} | {'lowbit µs':>9} | {'× torch':>7} | {'rel err':>8} | status")
    for m, n, k in args.shape or W1_SHAPES:
        try:
            r = time_shape(m, n, k, args, l2_bytes, stream)
        except (RuntimeError, ValueError, TypeError) as e:  # a refused shape or an out-of-memory
            r = {"m": m, "n": n, "k": k, "status": f"ERROR: {str(e).splitlines()[0]}"}
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        results.append(r)
        shape = f"{m}x{n}x{k}"
        if "torch_us" in r:
            print(f"{shape:>16} | {r['torch_us']:9.2f} | {r['lowbit_us']:9.2f} | {r['x_torch']:7.3f} | "
                  f"{r['rel_err']:8.2e} | {r['status']}", flush=True)
        else:
            print(f"{shape:>16} | {r['status']}", flush=True)
    passed = [r for r in results if r["status"] == "ok"]
    geomean = math.exp(sum(math.log(r["x_torch"]) for r in passed) / len(passed)) if passed else None
    left_out = len(results) - len(passed)
    if geomean is not None:
        print(f"geomean × torch over {len(passed)} shapes: {geomean:.3f}"
              + (f" ({left_out} failed shapes left out)" if left_out else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "l2_bytes": l2_bytes, "torch": torch.__version__,
                       "lowbit": lowbit.__version__, "replays": args.replays, "geomean_x_torch": geomean,
                       "results": results}, f, indent=1)
    return 0 if left_out == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
