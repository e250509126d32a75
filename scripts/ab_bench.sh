#!/usr/bin/env bash
# A/B on the device: builds the bench of an older tree in ab_old/ (git archive <commit> | tar -x -C ab_old)
# next to this one and runs both on the same arguments, alternating, twice. Interleaving two binaries
# is not possible, so alternate runs stand in for it; compare medians across both rounds.
# Usage: bash scripts/ab_bench.sh [bench args...]
set -uo pipefail
OUT=${OUT:-/tmp/lowbit-out}
mkdir -p "$OUT"
cmake -S ab_old -B ab_old/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=OFF > "$OUT/ab_configure.log" 2>&1
ninja -C ab_old/build -j16 lowbit-bench > "$OUT/ab_build.log" 2>&1 || { tail -20 "$OUT/ab_build.log"; exit 1; }
[ -x build-dev/lowbit-bench ] || { echo "build-dev/lowbit-bench missing: run scripts/device_run.sh first"; exit 1; }
for round in 1 2; do
  for side in old new; do
    bin=build-dev/lowbit-bench
    [ $side = old ] && bin=ab_old/build/lowbit-bench
    timeout 120 $bin "$@" > "$OUT/ab_${side}_$round.log" 2>&1
    echo "== $side round $round"
    sed -n '/^suite/,$p' "$OUT/ab_${side}_$round.log" | cut -c1-110
  done
done
