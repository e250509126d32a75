#!/usr/bin/env bash
# Experiment builds side by side: each NAME=FLAGS builds lowbit-bench in build-NAME with those
# CUDA flags (e.g. a temporary -DLOWBIT_EXP_... switch in a kernel), then all are timed without
# baselines on the W5 sets and three W4 shapes. Results of such builds may be wrong on purpose;
# only their timings count (docs/perf.md W4 v3).
# Usage (device): bash scripts/exp_nvfp4.sh "BASE=-DLOWBIT_EXP_NONE" "X=-DLOWBIT_EXP_X" ...
set -u
OUT=${OUT:-/tmp/lowbit-out}
mkdir -p "$OUT"
for spec in "$@"; do
  x=${spec%%=*}; flag=${spec#*=}
  cmake -S . -B build-$x -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$flag" > "$OUT/cfg-$x.log" 2>&1
  ninja -C build-$x -j16 lowbit-bench > "$OUT/build-$x.log" 2>&1 || { echo "build $x failed"; tail -5 "$OUT/build-$x.log"; }
done
for spec in "$@"; do
  x=${spec%%=*}
  echo "== $x"
  build-$x/lowbit-bench --suite W5 --no-baseline 2>&1 | grep -E "^W5 " | cut -c1-62
  build-$x/lowbit-bench --suite W4 --no-baseline 2>&1 |
    grep -E "^W4 " | cut -c1-62
done
