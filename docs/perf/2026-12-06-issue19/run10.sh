#!/bin/bash
# (Prepared in the third session; run in the fourth (on an H100), with the binary of a24d845.)
# Device run 10 of issue 19 (third session): Nsight Compute on the kernels that miss their
# targets, with the binary of a24d845 (B = tessel_a24_s):
#   1. decode B = 1 (S = 4096): the q GEMV (decode_1, 1.36x its floor), the down GEMV
#      (decode_14, 1.26x) and the split attention (decode_7_ranges, 4.5x);
#   2. prefill T = 2048: the attention kernel (prefill_6) with --wgmma-attention, 3x cuDNN.
# Usage (device): bash docs/perf/2026-12-06-issue19/run10.sh   (writes under $OUT)
B=./target/release/tessel_a24_s
L=$OUT/logs; mkdir -p $L
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
timeout 100 ncu --kernel-name regex:'decode_(1|14|7_ranges)$' --launch-count 3 $S $B run examples/qwen3_14b/layer.tsl --step decode --profile fast --dim B=1 --dim T=1 --dim S=4096 --fill len=iota:4095 -o /tmp/d.safetensors > $L/ncu_decode.txt 2>&1
echo "rc $?" >> $L/ncu_decode.txt
timeout 60 ncu --kernel-name regex:'prefill_6$' --launch-count 1 $S --section InstructionStats $B run examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --wgmma-attention -o /tmp/p.safetensors > $L/ncu_attention.txt 2>&1
echo "rc $?" >> $L/ncu_attention.txt
# Added in the fourth session: the ping-pong GEMMs that miss cuBLAS (gate 1.21x, down 1.12x, q 1.09x).
timeout 120 ncu --kernel-name regex:'prefill_(1|11|13)$' --launch-count 3 $S --section InstructionStats $B run examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --wgmma-pingpong -o /tmp/p2.safetensors > $L/ncu_pingpong.txt 2>&1
echo "rc $?" >> $L/ncu_pingpong.txt
