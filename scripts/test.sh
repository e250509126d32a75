#!/usr/bin/env bash
# Builds lowbit and runs the whole test suite, C++ and Python: CPU tests always; GPU tests (label
# gpu) run on a Hopper GPU and are reported as skipped, with the reason, anywhere else.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
extra=()
# Without an installed GoogleTest, build it from a source copy (the GPU machine has none).
if [ -d .deps/googletest ]; then extra+=(-DLOWBIT_GTEST_SOURCE="$PWD/.deps/googletest"); fi
# The PyTorch operators and their pytest suite, wherever torch and pytest import.
if python3 -c "import torch, pytest" >/dev/null 2>&1; then
  extra+=(-DLOWBIT_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)")
else
  echo "python3 cannot import torch and pytest: the PyTorch extension and its tests are not built"
fi
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=ON "${extra[@]}"
cmake --build "$BUILD" -j "$JOBS"
# ctest lists skipped tests without their reason; say once, up front, why GPU tests will skip.
if [ -x "$BUILD/lowbit-tests-gpu" ]; then
  why=$("$BUILD/lowbit-tests-gpu" --gtest_filter='Fp8GemmGpu.RejectsBadInputOnDevice' 2>&1 | grep -m1 "no Hopper GPU" || true)
  if [ -n "$why" ]; then echo "GPU tests will be reported as skipped: $why"; fi
fi
exec ctest --test-dir "$BUILD" --output-on-failure --timeout 600 "$@"
