#!/usr/bin/env bash
# Where a kernel's warps stall, instruction by instruction (ncu warp-state sampling on the SASS).
# Usage (on the device, after a build in build-dev):
#   bash scripts/ncu_sass.sh NAME KERNEL_REGEX [lowbit-bench args...]
# Writes $OUT/NAME.txt: the speed-of-light, memory and warp-state summaries, then the 45 SASS
# instructions with the most stall samples (with their share of all samples).
set -uo pipefail
OUT=${OUT:-/tmp/lowbit-out}
name=$1 regex=$2
shift 2
rep=/tmp/ncu-$name
ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section SourceCounters --section ComputeWorkloadAnalysis -k "regex:$regex" --launch-skip 2 --launch-count 1 \
  -f -o "$rep" build-dev/lowbit-bench --samples 50 "$@" > "/tmp/ncu-$name.run.log" 2>&1
{
  echo "== $name: lowbit-bench $* (kernel ~ $regex)"
  ncu -i "$rep.ncu-rep" --page details 2>&1 | grep -vE '^\s*-{5,}|^\s*$' | head -150
  echo "-- stall reasons (warp-state samples)"
  ncu -i "$rep.ncu-rep" --page raw 2>&1 | grep -E 'smsp__pcsamp_warps_issue_stalled_[a-z_]+ ' | grep -v not_issued |
    awk '{gsub(",", "", $NF); print $NF, $1}' | sort -rn | head -14
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "/tmp/ncu-$name.csv" 2>&1
  python3 - "/tmp/ncu-$name.csv" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = None
for i, r in enumerate(rows):
    if any("Warp Stall Sampling (All" in c for c in r):
        hdr, body = r, rows[i + 1:]
        break
if hdr is None:
    print("no source table; first lines:"); [print(",".join(r)[:200]) for r in rows[:10]]; sys.exit(0)
col = next(j for j, c in enumerate(hdr) if "Warp Stall Sampling (All" in c)
src = next((j for j, c in enumerate(hdr) if c.strip() == "Source"), 1)
addr = next((j for j, c in enumerate(hdr) if c.strip() == "Address"), 0)
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[col]) for r in body if len(r) > col) or 1.0
print(f"stall samples: {tot:.0f}; top instructions:")
for r in sorted((r for r in body if len(r) > col), key=lambda r: -num(r[col]))[:45]:
    print(f"{num(r[col])/tot*100:5.1f}%  {r[addr]:>6}  {r[src][:90]}")
EOF
} > "$OUT/$name.txt" 2>&1
grep -E 'Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Memory Throughput' "$OUT/$name.txt" | head -5
sed -n '/-- stall reasons/,+8p' "$OUT/$name.txt"
sed -n '/stall samples/,+8p' "$OUT/$name.txt"
