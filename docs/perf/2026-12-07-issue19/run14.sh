#!/bin/bash
# Device run 14 (issue 19 fifth session / issue 20): the GPU tests of the external-launch path
# (tessel-cuda `external`, tessel-driver `gpu`, tessel-cuda `gpu`) from test binaries built
# here at 5d94877 (`cargo test --release -p tessel-cuda --test external -p tessel-driver
# --test gpu --no-run`, stripped into target/release/gt/; the device has no Rust), then
# run13.sh (the decode attention without its padding row half, on the GPU).
# Usage (device): bash docs/perf/2026-12-07-issue19/run14.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
for t in target/release/gt/*; do
  echo "== $t" >> $L/gputests.txt
  timeout 120 $t --ignored --test-threads=1 >> $L/gputests.txt 2>&1; echo "rc $?" >> $L/gputests.txt
done
bash docs/perf/2026-12-06-issue19/run13.sh
grep -h "PASS\|FAIL\|rc \|ERROR SUMMARY\|test result" $L/*.txt > $L/summary.txt 2>&1
