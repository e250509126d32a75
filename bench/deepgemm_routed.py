# DeepGEMM's contiguous GEMM on the per-expert sizes of a routed MoE batch (the W6 bench's routing:
# N(0, 2) logits, top-k), each expert's rows padded to DeepGEMM's M alignment with -1 group ids, as
# an MoE engine calls it. Timed with probe_deepgemm's own rules (time_graph, >2x L2 of sets).
import sys, math, torch, zlib, statistics
sys.path.insert(0, sys.argv[1])
import probe_deepgemm as H
import deep_gemm

def routed_set(mt, e, topk, n, k, seed):
    g = torch.Generator(device='cuda'); g.manual_seed(seed)
    logits = torch.randn(mt, e, device='cuda', generator=g) * 2.0
    ids = logits.topk(topk, dim=1).indices.flatten()
    counts = torch.bincount(ids, minlength=e).tolist()
    al = deep_gemm.get_mk_alignment_for_contiguous_layout()
    padded = [(c + al - 1) // al * al for c in counts]
    m = sum(padded)
    idx = torch.cat([torch.cat([torch.full((c,), i, dtype=torch.int32), torch.full((p - c,), -1, dtype=torch.int32)])
                     for i, (c, p) in enumerate(zip(counts, padded))]).cuda()
    a, sfa = H.quant_a(torch.randn(m, k, device='cuda', dtype=torch.bfloat16))
    b2, sfb2 = H.quant_b(torch.randn(e * n, k, device='cuda', dtype=torch.bfloat16))
    b, sfb = b2.view(e, n, k), sfb2.view(e, n // 128, k // 128)
    sfa_t = deep_gemm.transform_sf_into_required_layout(sfa, m, k, (1, 128))
    sfb_t = deep_gemm.transform_sf_into_required_layout(sfb, n, k, (128, 128), e)
    d = torch.empty(m, n, device='cuda', dtype=torch.bfloat16)
    return dict(a=a, sfa=sfa_t, b=b, sfb=sfb_t, d=d, idx=idx), counts, padded

l2 = torch.cuda.get_device_properties(0).L2_cache_size
for case in sys.argv[2:]:
    mt, e, topk, n, k = map(int, case.split('x'))
    first, counts, padded = routed_set(mt, e, topk, n, k, 1)
    per = H.set_bytes(first)
    n_sets = max(2, (2 * l2) // per + 1)
    sets = [first] + [routed_set(mt, e, topk, n, k, 1 + i)[0] for i in range(1, n_sets)]
    first['d'].fill_(float('nan'))
    H.call('contig', first); torch.cuda.synchronize()
    real = first['idx'] >= 0  # rows no expert owns are not written
    finite = bool(torch.isfinite(first['d'][real].float()).all())
    rough = H.rough_us('contig', sets)
    batch = int(min(400, max(n_sets, math.ceil(3000.0 / max(rough, 1.0)))))
    batch = int(math.ceil(batch / n_sets) * n_sets)
    med, lo, hi = H.time_graph('contig', sets, batch, 50)
    tiles = sum(p // 128 for p in padded)
    flops = 2.0 * mt * topk * n * k
    print('deepgemm-routed %s tokens=%d E=%d top%d N=%d K=%d: rows %d (padded %d, %d M-tiles), %.2f us (min %.2f max %.2f), %.1f TFLOPS useful, output finite: %s'
          % (case, mt, e, topk, n, k, mt * topk, sum(padded), tiles, med, lo, hi, flops / (med * 1e6), finite), flush=True)
    del sets, first
    torch.cuda.empty_cache()
