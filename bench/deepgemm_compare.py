#!/usr/bin/env python3
"""Block-scaled dense: lowbit's speed / DeepGEMM's per shape, and geomeans, the 23 harness shapes
apart from the rest (held out).
usage: deepgemm_compare.py DEEPGEMM.json LOWBIT.json [LOWBIT2.json ...]
DEEPGEMM.json: .baselines/deepgemm's harness (--json); LOWBIT*.json: lowbit-bench --json of the
same call (several: e.g. builds of an A/B, each a column)."""
import json, math, sys

S23 = ('64x2112x7168 64x4096x7168 64x7168x16384 64x7168x2048 64x24576x1536 64x32768x512 128x2112x7168 '
       '128x4096x7168 128x7168x16384 128x7168x2048 128x24576x1536 128x32768x512 4096x2112x7168 4096x4096x7168 '
       '4096x7168x16384 4096x7168x2048 4096x24576x1536 4096x32768x512 4096x8192x8192 2048x5120x5120 '
       '1000x2112x7168 4096x28672x4096 4096x4096x14336').split()


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    dg = {r['shape']: r['us'] for r in json.load(open(argv[1]))['rows'] if r['op'] == 'fp8_gemm_nt' and r.get('check_ok', True)}
    runs = []
    for p in argv[2:]:
        runs.append({'%dx%dx%d' % (r['m'], r['n'], r['k']): r for r in json.load(open(p))['results']})
    names = [p.rsplit('/', 1)[-1][:12] for p in argv[2:]]
    shapes = [s for s in dg if s in runs[0]]
    for title, group in (('the 23 DeepGEMM shapes', [s for s in S23 if s in shapes]),
                         ('held out', [s for s in shapes if s not in S23])):
        if not group:
            continue
        print('== %s' % title)
        print('%-16s %9s ' % ('shape', 'DG us') + ''.join('%12s %6s %5s ' % (n, 'x DG', '%fl') for n in names) + ' config (first)')
        logs = [[] for _ in runs]
        for s in group:
            row = '%-16s %9.2f ' % (s, dg[s])
            for i, run in enumerate(runs):
                r = run.get(s)
                if r is None or r['us'] <= 0 or r['status'] != 'ok':
                    row += '%12s %6s %5s ' % ('-', '-', '-')
                    continue
                x = dg[s] / r['us']
                logs[i].append(math.log(x))
                row += '%12.2f %6.3f %5.0f ' % (r['us'], x, r['pct_floor'])
            print(row + ' ' + runs[0].get(s, {}).get('config', '')[:44])
        for i, n in enumerate(names):
            if logs[i]:
                print('geomean %s / DeepGEMM over %d: %.4f (min %.3f)' % (
                    n, len(logs[i]), math.exp(sum(logs[i]) / len(logs[i])), math.exp(min(logs[i]))))


if __name__ == '__main__':
    main(sys.argv)
