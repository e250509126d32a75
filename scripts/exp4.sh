set -o pipefail
mkdir -p $OUT
bash scripts/device_run.sh build-only > $OUT/build0.log 2>&1; tail -2 $OUT/build0.log
timeout 200 build-dev/lowbit-tests-gpu --gtest_filter='Fp8GemmGpu.SmallIntegers*:Fp8GemmGpu.Edge*:Fp8GemmGpu.Random*' > $OUT/gtest.log 2>&1; echo "gtest rc=$?"; grep -E '^\[  (FAILED|PASSED) ' $OUT/gtest.log
bash scripts/ab_bench.sh --shape 4096x8192x8192 --shape 4096x24576x1536 --shape 4096x4096x7168 --config bn=256 --alt bn=128 --alt bn=192 > $OUT/ab.log 2>&1
grep -E '^custom|alt' $OUT/ab_*_[12].log | sed 's/stages=[0-9],splits=1,group=0,grid=0,turns=0//' | cut -c1-150
