#!/usr/bin/env bash
# Experiment builds side by side: each NAME=FLAGS builds lowbit-bench in build-NAME with those
# CUDA flags (e.g. a temporary -DLOWBIT_EXP_... switch in a kernel), then the builds are timed
# in turns, ROUNDS times, on each suite of SUITES (default "W5 W4", without baselines) with
# BENCH_ARGS. Results of such builds may be wrong on purpose; only their timings count
# (docs/perf.md W4 v3).
# Usage (device): [SUITES="W1-square"] [BENCH_ARGS="--alt bn=192,promote=2"] [ROUNDS=2] \
#   bash scripts/exp_builds.sh "BASE=-DLOWBIT_EXP_NONE" "X=-DLOWBIT_EXP_X" ...
set -u
OUT=${OUT:-/tmp/lowbit-out}
SUITES=${SUITES:-W5 W4}
BENCH_ARGS=${BENCH_ARGS:---no-baseline}
ROUNDS=${ROUNDS:-1}
mkdir -p "$OUT"
for spec in "$@"; do
  x=${spec%%=*}; flag=${spec#*=}
  cmake -S . -B build-$x -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$flag" > "$OUT/cfg-$x.log" 2>&1
  ninja -C build-$x -j16 lowbit-bench > "$OUT/build-$x.log" 2>&1 || { echo "build $x failed"; tail -5 "$OUT/build-$x.log"; }
  grep -iE "spill|Potential Performance Loss" "$OUT/build-$x.log" | head -5
done
for round in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    x=${spec%%=*}
    for suite in $SUITES; do
      echo "== $x $suite round $round"
      # shellcheck disable=SC2086
      build-$x/lowbit-bench --suite "$suite" $BENCH_ARGS 2>&1 | tee -a "$OUT/exp-$x.log" | grep -E "^(W|BS|geo)" | cut -c1-150
    done
  done
done
