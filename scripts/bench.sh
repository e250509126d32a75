#!/usr/bin/env bash
# Builds lowbit and runs the default benchmark suite against cuBLASLt. Needs a Hopper (sm_90)
# GPU: without one lowbit-bench says so and exits non-zero. Extra arguments go to lowbit-bench
# (e.g. --suite W1-llm, --shape 4096x8192x8192, --json out.json, --explain).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-bench}
JOBS=${JOBS:-$(nproc)}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=OFF
cmake --build "$BUILD" -j "$JOBS" --target lowbit-bench
exec "$BUILD/lowbit-bench" "$@"
