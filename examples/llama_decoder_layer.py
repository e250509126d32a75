"""A Llama-3.1-8B decoder layer (Hugging Face transformers' own modeling code, random weights,
nothing downloaded) with its seven projections on lowbit's FP8 GEMMs, against the same layer in
BF16 and on torch._scaled_mm.

Variants (each a CUDA graph of one layer forward; weights quantized once, at load):
  bf16      the layer as transformers builds it: the accuracy reference
  torch     vLLM's dynamic FP8 scheme on PyTorch: per-token activation scales computed by torch
            ops, per-channel weight scales, torch._scaled_mm with rowwise scales (cuBLASLt)
  lowbit    the same scheme on lowbit: lowbit's per-token quantizer, fp8_gemm with per-row scales,
            SiLU(gate) * up fused with the down projection's quantization, and the layer's two
            residual adds fused into the o_proj and down_proj epilogues
  lowbit-bs the block-scaled recipe (DeepSeek-V3, Qwen3 FP8): 128 x 128 weight scales, 1 x 128
            activation scales, lowbit.fp8_blockscaled_gemm
In the FP8 variants q/k/v and gate/up run as one GEMM each (merged weights), as inference
engines run them.

    PYTHONPATH=<build>/python python3 examples/llama_decoder_layer.py [--tokens 1 16 64 2048] [--json out.json]

Decode sizes run a batch of T sequences of one token each (GEMMs of M = T); prefill runs one
sequence of T tokens under the causal mask. The check compares each FP8 layer's output with the
BF16 layer's: the error is reported relative to what the layer adds to its input (the residual
stream itself passes through exactly); FP8 quantization error is expected there, NaN never.
"""

import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

E4M3_MAX = 448.0


def _require_gpu():
    if not torch.cuda.is_available():
        sys.exit("llama_decoder_layer: needs a CUDA GPU (a Hopper: lowbit runs on sm_90)")
    if torch.cuda.get_device_capability() != (9, 0):
        sys.exit(f"llama_decoder_layer: lowbit runs on Hopper (sm_90); this GPU is sm_{''.join(map(str, torch.cuda.get_device_capability()))}")


def llama31_8b_config():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072, vocab_size=128256,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        torch_dtype=torch.bfloat16)
    cfg._attn_implementation = "sdpa"
    return cfg


# ---- FP8 projection backends ---------------------------------------------------------------------


def torch_quantize_per_token(x):
    """vLLM's torch fallback: scale = amax / 448 per row, x / scale, cast (several kernels)."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / E4M3_MAX
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


class TorchScaledMM:
    """torch._scaled_mm with rowwise scales: a [M, 1] and b [1, N]."""

    name = "torch"

    def __init__(self, w):
        wq, ws = torch_quantize_per_token(w)
        self.w_t = wq.t()  # [K, N], column-major as _scaled_mm wants its second operand
        self.ws = ws.reshape(1, -1)

    @staticmethod
    def quantize(x):
        return torch_quantize_per_token(x)

    def gemm(self, xq_and_scale):
        xq, xs = xq_and_scale
        return torch._scaled_mm(xq, self.w_t, scale_a=xs, scale_b=self.ws, out_dtype=torch.bfloat16)

    @staticmethod
    def silu_mul_quantize(gu):
        g, u = gu.chunk(2, dim=-1)
        return torch_quantize_per_token(F.silu(g) * u)


class LowbitRowwise:
    """lowbit.fp8_gemm with per-token x per-channel scales; lowbit quantizes the activations."""

    name = "lowbit"
    fuses_residual = True

    def __init__(self, w):
        import lowbit

        self.lowbit = lowbit
        self.wq, self.ws = lowbit.quantize_fp8_per_token(w)  # per output channel

    def quantize(self, x):
        return self.lowbit.quantize_fp8_per_token(x)

    def gemm(self, xq_and_scale, residual=None):
        xq, xs = xq_and_scale
        return self.lowbit.fp8_gemm(xq, self.wq, a_scale=xs, b_scale=self.ws, residual=residual)

    def silu_mul_quantize(self, gu):
        return self.lowbit.silu_mul_quantize_fp8(gu)


class LowbitBlockScaled:
    """lowbit.fp8_blockscaled_gemm: 128 x 128 weight scales, 1 x 128 activation scales."""

    name = "lowbit-bs"

    def __init__(self, w):
        import lowbit

        self.lowbit = lowbit
        self.wq, self.sfb = lowbit.quantize_fp8_128x128(w)

    def quantize(self, x):
        return self.lowbit.quantize_fp8_1x128(x)

    def gemm(self, xq_and_sfa):
        xq, sfa = xq_and_sfa
        return self.lowbit.fp8_blockscaled_gemm(xq, self.wq, sfa, self.sfb)

    def silu_mul_quantize(self, gu):
        g, u = gu.chunk(2, dim=-1)
        return self.lowbit.quantize_fp8_1x128(F.silu(g) * u)


# ---- the swap ------------------------------------------------------------------------------------


class MergedProjection:
    """Several projections of one input (q/k/v, gate/up) as one GEMM on concatenated weights; each
    original Linear becomes a view of the merged output, so the input is quantized once."""

    def __init__(self, backend_cls, linears):
        w = torch.cat([l.weight.detach() for l in linears], dim=0)
        self.backend = backend_cls(w)
        self.widths = [l.weight.shape[0] for l in linears]
        self._last_in = None
        self._last_out = None

    def run(self, x):
        if x is not self._last_in:  # the same tensor object: q, k and v of one forward
            flat = x.reshape(-1, x.shape[-1])
            y = self.backend.gemm(self.backend.quantize(flat))
            self._last_in, self._last_out = x, y.reshape(*x.shape[:-1], y.shape[-1])
        return self._last_out

    def part(self, i):
        start = sum(self.widths[:i])
        merged = self

        class Part(nn.Module):
            def forward(self, x):
                return merged.run(x)[..., start:start + merged.widths[i]]

        return Part()


class Fp8Linear(nn.Module):
    def __init__(self, backend_cls, linear):
        super().__init__()
        self.backend = backend_cls(linear.weight.detach())
        self.residual = None  # set by FusedResidualLayer around the call: added in the GEMM's epilogue

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        q = self.backend.quantize(flat)
        if self.residual is None:
            y = self.backend.gemm(q)
        else:
            y = self.backend.gemm(q, residual=self.residual.reshape(flat.shape[0], -1))
        return y.reshape(*x.shape[:-1], y.shape[-1])


class Fp8SwiGLU(nn.Module):
    """gate/up as one GEMM, SiLU(gate) * up fused with the down projection's input quantization
    (one lowbit kernel; two or three torch kernels in the torch variant), then down."""

    def __init__(self, backend_cls, mlp):
        super().__init__()
        self.gate_up = MergedProjection(backend_cls, [mlp.gate_proj, mlp.up_proj])
        self.down = backend_cls(mlp.down_proj.weight.detach())
        self.residual = None  # as Fp8Linear's, for the down projection

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        gu = self.gate_up.backend.gemm(self.gate_up.backend.quantize(flat))
        h = self.down.silu_mul_quantize(gu)
        if self.residual is None:
            y = self.down.gemm(h)
        else:
            y = self.down.gemm(h, residual=self.residual.reshape(flat.shape[0], -1))
        return y.reshape(*x.shape[:-1], y.shape[-1])


class FusedResidualLayer(nn.Module):
    """The decoder layer's own modules (its RMSNorms, and attention with the rotary embedding and
    SDPA) in the order of transformers' LlamaDecoderLayer.forward, with its two residual adds moved
    into the epilogues of o_proj and down_proj (lowbit's fp8_gemm ``residual=``): one kernel and
    one [tokens, 4096] round trip fewer each."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, position_embeddings=None):
        L = self.layer
        L.self_attn.o_proj.residual = x  # o_proj returns x + attention output
        h, _ = L.self_attn(hidden_states=L.input_layernorm(x), attention_mask=None,
                           position_embeddings=position_embeddings)
        L.self_attn.o_proj.residual = None
        L.mlp.residual = h  # down_proj returns h + MLP output
        y = L.mlp(L.post_attention_layernorm(h))
        L.mlp.residual = None
        return y


def fp8_layer(bf16_layer, backend_cls):
    import copy

    layer = copy.deepcopy(bf16_layer)
    attn = layer.self_attn
    qkv = MergedProjection(backend_cls, [attn.q_proj, attn.k_proj, attn.v_proj])
    attn.q_proj, attn.k_proj, attn.v_proj = qkv.part(0), qkv.part(1), qkv.part(2)
    attn.o_proj = Fp8Linear(backend_cls, attn.o_proj)
    layer.mlp = Fp8SwiGLU(backend_cls, layer.mlp)
    return FusedResidualLayer(layer) if getattr(backend_cls, "fuses_residual", False) else layer


# ---- running and timing --------------------------------------------------------------------------


def forward(layer, x, pe):
    out = layer(x, position_embeddings=pe)
    return out[0] if isinstance(out, tuple) else out


def graphed(layer, x, pe):
    """The layer's forward captured as a CUDA graph (warmed up on a side stream first)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            forward(layer, x, pe)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        y = forward(layer, x, pe)
    return g, y


def time_graph(g, reps):
    for _ in range(10):
        g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 64, 2048])
    ap.add_argument("--prefill-from", type=int, default=1024,
                    help="token counts from this one up run as one sequence (prefill); below, as a decode batch")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    _require_gpu()
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    torch.manual_seed(args.seed)
    cfg = llama31_8b_config()
    dev = torch.device("cuda")
    base = LlamaDecoderLayer(cfg, layer_idx=0).to(dev, torch.bfloat16).eval()
    rotary = LlamaRotaryEmbedding(config=cfg, device=dev)
    layers = {"bf16": base}
    for cls in (TorchScaledMM, LowbitRowwise, LowbitBlockScaled):
        layers[cls.name] = fp8_layer(base, cls)

    rows, ok = [], True
    print(f"Llama-3.1-8B decoder layer on {torch.cuda.get_device_name()}: hidden 4096, 32 heads (8 KV), MLP 14336")
    print(f"{'tokens':>7} {'step':>8} | " + " | ".join(f"{n + ' us':>12}" for n in layers) +
          " | lowbit x torch | lowbit tok/s | err lowbit | err torch | err lowbit-bs")
    for t in args.tokens:
        prefill = t >= args.prefill_from
        shape = (1, t, cfg.hidden_size) if prefill else (t, 1, cfg.hidden_size)
        x = torch.randn(shape, device=dev, dtype=torch.bfloat16)
        pos = torch.arange(shape[1], device=dev).unsqueeze(0).expand(shape[0], -1)
        pe = rotary(x, pos)
        outs, times = {}, {}
        for name, layer in layers.items():
            g, y = graphed(layer, x, pe)
            g.replay()
            torch.cuda.synchronize()
            outs[name] = y.clone()
            times[name] = time_graph(g, args.reps)
            del g
        delta = (outs["bf16"] - x).float()
        errs = {}
        for name in ("lowbit", "torch", "lowbit-bs"):
            y = outs[name]
            finite = bool(torch.isfinite(y).all())
            errs[name] = float((y.float() - outs["bf16"].float()).norm() / delta.norm()) if finite else math.nan
            # FP8 quantization error of a whole layer: a few percent of what it adds; NaN never passes.
            if not finite or not errs[name] < 0.1:
                ok = False
        ratio = times["torch"] / times["lowbit"]
        row = {"tokens": t, "step": "prefill" if prefill else "decode", "us": times, "lowbit_x_torch": ratio,
               "lowbit_tokens_per_s": t / times["lowbit"] * 1e6, "torch_tokens_per_s": t / times["torch"] * 1e6,
               "rel_err_of_layer_delta": errs}
        rows.append(row)
        print(f"{t:>7} {row['step']:>8} | " + " | ".join(f"{times[n]:>12.1f}" for n in layers) +
              f" | {ratio:>14.3f} | {row['lowbit_tokens_per_s']:>12.0f} | {errs['lowbit']:>10.4f} | "
              f"{errs['torch']:>9.4f} | {errs['lowbit-bs']:>13.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    if not ok:
        print("FAIL: an FP8 layer's output is non-finite or off by more than 10% of the layer's delta")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
