set -u
OUT=${OUT:-/tmp/o}
for spec in "$@"; do
  x=${spec%%=*}; flag=${spec#*=}
  cmake -S . -B build-$x -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOWBIT_BUILD_TESTS=OFF "-DCMAKE_CUDA_FLAGS=$flag" > $OUT/cfg-$x.log 2>&1
  ninja -C build-$x -j16 lowbit-bench > $OUT/build-$x.log 2>&1 || { echo "build $x failed"; tail -5 $OUT/build-$x.log; }
done
for r in 1 2; do
for spec in "$@"; do
  x=${spec%%=*}
  echo "== $x"
  build-$x/lowbit-bench --suite W4 --shape 16x7168x16384 --shape 128x4096x7168 --no-baseline 2>&1 | grep -E "^W4 " | awk -F'|' '{print $1, $2, $5}' | cut -c1-100
done
done
