#!/bin/bash
# Device run 42 (stop 37): is the ping-pong GEMM bound by shared-memory bandwidth?
# Run 41's ncu: cuBLAS's kernel for the q projection (nvjet_sm90_tst_320x128_64x3_1x2,
# cooperative, a 320-wide tile, 3 stages, clusters of 2) runs its L1/shared pipe at 95%.
# The ping-pong's 128 x 128 a warpgroup reads 12 KiB of operands per k step of 16 (128
# tensor cycles) and TMA writes 8 KiB: 160 bytes a cycle against the SM's 128; the
# 128 x 256 tile of two warpgroups (m64n256k16) reads 20 and writes 12 KiB per 256 cycles.
#   tessel_b4_s  as in run 41 (this stop's code, 4 stages)
# 1. the Qwen3-14B prefill layer: the ping-pong (default) against the 128 x 256 TMA tile
#    (--no-wgmma-pingpong --wgmma-tma: a producer warpgroup, two consumers, not persistent);
# 2. ncu MemoryWorkloadAnalysis of the q GEMM (prefill_1) on the ping-pong and on the
#    128 x 256 TMA tile (cuBLAS's L1/shared pipe: run 41, 95%).
# Usage (device): bash docs/perf/2026-12-07-stop37/run42.sh   (logs under $OUT/logs)
B=./target/release/tessel_b4_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
for x in "" "--no-wgmma-pingpong --wgmma-tma"; do TMO=40 t prefill $B bench $F $x; done
F1="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
M=sm__cycles_elapsed.avg.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --metrics $M"
TMO=60 t ncu ncu --clock-control none --kernel-name regex:"prefill_1$" --launch-count 1 $S $B bench $F1
TMO=60 t ncu ncu --clock-control none --kernel-name regex:"prefill_1$" --launch-count 1 $S $B bench $F1 --no-wgmma-pingpong --wgmma-tma
grep -h "^== \|prefill_1 \|prefill_8 \|prefill_1[012] \|replayed\|rc [1-9]" $L/prefill.txt > $L/summary.txt 2>&1
