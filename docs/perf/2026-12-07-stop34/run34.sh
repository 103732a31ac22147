#!/bin/bash
# Device run 34 (stop 34): what limits the Qwen3-14B decode layer at B = 8 (fast, 0aa7424,
# binary tessel_r3_s): Nsight Compute on the o_proj tensor-core GEMV (decode_9), the down
# GEMV (decode_13), the split attention (decode_8_ranges) and the RMSNorm (decode_10).
# Usage (device): bash docs/perf/2026-12-07-stop34/run34.sh   (writes under $OUT/logs)
B=./target/release/tessel_r3_s
L=$OUT/logs; mkdir -p $L
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats"
timeout 200 ncu --kernel-name regex:'decode_(9|10|13|8_ranges)$' --launch-count 4 $S $B run examples/qwen3_14b/layer.tsl --step decode --profile fast --dim B=8 --dim T=1 --dim S=4096 --fill len=iota:4095 -o /tmp/d.safetensors > $L/ncu_decode_b8.txt 2>&1
echo "rc $?" >> $L/ncu_decode_b8.txt
