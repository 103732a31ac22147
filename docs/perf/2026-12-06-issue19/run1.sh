#!/bin/bash
# Device run 1 of issue 19's second session: run 18 of the last session (the merged tree:
# sm_90a header, per-warp executor) and the wgmma statements on the GPU
# (`gpu_mma`: every tensor-core kernel incl. the new wgmma GEMM, GPU against the executor).
# Usage (device): bash docs/perf/2026-12-06-issue19/run1.sh   (writes under $OUT)
# Binaries (built here, carried): target/release/tessel_s (stripped release build),
# target/release/gpu_mma_s (stripped `cargo test -p tessel --test gpu_mma --no-run`).
bash docs/perf/2026-12-06-issue18/run18.sh
L=$OUT/logs
timeout 200 ./target/release/gpu_mma_s --ignored --nocapture --test-threads=1 > $L/gpu_mma.txt 2>&1
echo "rc $?" >> $L/gpu_mma.txt
