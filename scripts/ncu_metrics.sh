#!/usr/bin/env bash
# Memory-system counters of one launch of each kernel matching a regex: time, DRAM bytes,
# L2 -> SM bytes, L2 and DRAM throughput. For "is this shape DRAM-, L2- or latency-bound".
# Usage (on the device, after a build in build-dev):
#   bash scripts/ncu_metrics.sh NAME KERNEL_REGEX [lowbit-bench args...]
# Writes $OUT/NAME.csv (raw) and prints one line per profiled kernel.
set -uo pipefail
OUT=${OUT:-/tmp/lowbit-out}
name=$1 regex=$2
shift 2
m=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum
m+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
m+=,sm__inst_executed_pipe_tensor_op_gmma.sum
ncu --metrics "$m" -k "regex:$regex" --launch-skip 3 --launch-count 6 --csv --page raw --print-units base \
  build-dev/lowbit-bench --samples 50 "$@" > "$OUT/$name.csv" 2> "$OUT/$name.err"
python3 - "$OUT/$name.csv" "$name" <<'PY'
import csv, sys
# ncu's CSV follows the bench's own output, whose lines may hold commas: start at its "ID" header.
rows = list(csv.reader(open(sys.argv[1])))
start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
if start is None or len(rows) < start + 3: print(sys.argv[2], "no ncu rows"); sys.exit(0)
hdr, units, body = rows[start], rows[start + 1], rows[start + 2:]
col = {h: i for i, h in enumerate(hdr)}
def v(r, k):
    try: return float(r[col[k]].replace(",", ""))
    except (KeyError, ValueError): return float("nan")
for r in body:
    t = v(r, "gpu__time_duration.sum")
    scale = 1e-3  # base units: ns
    print(f"{sys.argv[2]:>14} {r[col['Kernel Name']][:48]:48} t={t*scale:8.2f}us "
          f"dramR={v(r,'dram__bytes_read.sum')/1e6:7.1f}MB L2->SM={v(r,'lts__t_sectors_srcunit_tex_op_read.sum')*32/1e6:7.1f}MB "
          f"L2%={v(r,'lts__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f} DRAM%={v(r,'dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f} "
          f"gmma_warp_inst={v(r,'sm__inst_executed_pipe_tensor_op_gmma.sum'):.0f}")
PY
