set -o pipefail
mkdir -p $OUT
bash scripts/device_run.sh build-only > /tmp/b0.log 2>&1; tail -2 /tmp/b0.log
timeout 250 ctest --test-dir build-dev --output-on-failure --timeout 120 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E 'tests passed|Failed|FAILED' $OUT/ctest.log | head
for tool in memcheck racecheck; do timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build-dev/lowbit-tests-gpu --gtest_filter='Fp8GemmGpu.SmallIntegers*:Fp8GemmGpu.ClusterPairsExact:Fp8GemmGpu.Epilogue*' > /tmp/$tool.log 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/$tool.log | tail -1) outside-nvjet: $(grep -E 'Race reported|Invalid|Error:' /tmp/$tool.log | grep -vc nvjet)"; grep -E 'Race reported|Invalid __' /tmp/$tool.log | grep -v nvjet | sort | uniq -c | head -5; done
for s in W1-square W1-llm W2; do timeout 300 build-dev/lowbit-bench --suite $s --json $OUT/$s.json > /tmp/$s.log 2>&1; sed -n '/^suite/,$p' /tmp/$s.log | cut -c1-175; done
