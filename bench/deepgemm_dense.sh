#!/usr/bin/env bash
# Block-scaled dense GEMM beside DeepGEMM, in one device call (issue 39's bar): DeepGEMM's harness
# (.baselines/deepgemm, see its README) and lowbit-bench on the same shapes, then the ratio table
# (bench/deepgemm_compare.py). Sets: "23" (the harness's default dense shapes), "held" (held-out
# models, reported apart: Llama-3.1-8B, Qwen2.5-7B, Qwen2.5-14B, Gemma-2-9B at M = 16 and 128;
# never tuned on), or MxNxK,... Writes $OUT/deepgemm.json, $OUT/lowbit.json, $OUT/compare.txt.
#   bash bench/deepgemm_dense.sh [BUILD_DIR] [23|held|all|MxNxK,...]
set -uo pipefail
BUILD=${1:-build}; SET=${2:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S23="64x2112x7168 64x4096x7168 64x7168x16384 64x7168x2048 64x24576x1536 64x32768x512 128x2112x7168 128x4096x7168 128x7168x16384 128x7168x2048 128x24576x1536 128x32768x512 4096x2112x7168 4096x4096x7168 4096x7168x16384 4096x7168x2048 4096x24576x1536 4096x32768x512 4096x8192x8192 2048x5120x5120 1000x2112x7168 4096x28672x4096 4096x4096x14336"
HELD=""
for nk in 6144x4096 4096x4096 28672x4096 4096x14336 4608x3584 3584x3584 37888x3584 3584x18944 7168x5120 5120x5120 27648x5120 5120x13824 8192x3584 3584x4096 28672x3584 3584x14336; do
  for m in 16 128; do HELD="$HELD ${m}x$nk"; done
done
case "$SET" in
  23) SHAPES=$S23 ;; held) SHAPES=$HELD ;; all) SHAPES="$S23 $HELD" ;; *) SHAPES=$(echo "$SET" | tr ',' ' ') ;;
esac
[ -x "$BUILD/lowbit-bench" ] || { echo "no $BUILD/lowbit-bench: build it first"; exit 1; }
HERE=$(pwd)/.baselines/deepgemm
[ -f "$HERE/run.sh" ] || { echo "no .baselines/deepgemm: copy ../shared/baselines/deepgemm there and carry it"; exit 1; }
csv=$(echo $SHAPES | tr ' ' ',')
bash "$HERE/run.sh" --dense "$csv" --contig "" --masked "" --no-maxm-probe > "$OUT/deepgemm.log" 2>&1
echo "DeepGEMM: $(grep -c TFLOPS "$OUT/deepgemm.log") shapes timed"
args=(); for s in $SHAPES; do args+=(--shape "$s"); done
"$BUILD/lowbit-bench" --suite BS-dense "${args[@]}" --no-baseline --json "$OUT/lowbit.json" > "$OUT/lowbit.log" 2>&1
echo "lowbit-bench exit $?"
python3 bench/deepgemm_compare.py "$OUT/deepgemm.json" "$OUT/lowbit.json" | tee "$OUT/compare.txt"
