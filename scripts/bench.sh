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
EXTRA=()
# PyTorch's cuSPARSELt (W3's sparse baseline), when present; without it W3 rows say so.
CSLT=$(python3 -c "import nvidia.cusparselt as m; print(list(m.__path__)[0])" 2>/dev/null || true)
[ -n "$CSLT" ] && EXTRA+=(-DLOWBIT_CUSPARSELT_ROOT="$CSLT")
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=OFF "${EXTRA[@]}"
cmake --build "$BUILD" -j "$JOBS" --target lowbit-bench
exec "$BUILD/lowbit-bench" "$@"
