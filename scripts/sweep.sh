#!/usr/bin/env bash
# Times one shape under several forced configs (no baseline), one line each: data for the cost
# model. Usage: scripts/sweep.sh BUILD_DIR MxNxK "bn=64,splits=1" "bn=128,splits=2" ...
set -uo pipefail
bin=$1/lowbit-bench
shape=$2
shift 2
for cfg in "$@"; do
  line=$("$bin" --shape "$shape" --config "$cfg" --no-baseline 2>&1 | grep -E "^custom" | head -1)
  printf '%-16s %-22s %s\n' "$shape" "$cfg" "$(echo "$line" | awk -F'|' '{print $2}')"
done
