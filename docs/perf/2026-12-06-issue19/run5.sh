#!/bin/bash
# Device run 5 of issue 19's second session: the warp-specialised TMA tile (`wgmma: tma`,
# opt-in with --wgmma-tma; helper branch wgmma-tma merged) on the GPU for the first time.
#   B = target/release/tessel_s (this tree)
#   1. tessel check --wgmma-tma (fast) with tails in M, N, K and K wrapping the 4-stage ring;
#   2. racecheck and memcheck on the TMA kernel;
#   3. bench the Qwen3-14B prefill layer (T = 2048) with and without --wgmma-tma.
# (Trimmed to the last 269 s of the session's device time.)
# Usage (device): bash docs/perf/2026-12-06-issue19/run5.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
M="--profile fast --wgmma-tma"
t check $B check tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=600 --dim N=4100
t check $B explain tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=600 --dim N=4100
TMO=50 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=328 --dim N=4100 -o /tmp/r.safetensors
TMO=30 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=328 --dim N=4100 -o /tmp/m.safetensors
for f in "" "--wgmma-tma"; do
  t bench $B bench examples/qwen3_14b/layer.tsl --step prefill --profile fast $f --dim T=2048 --fill pos=iota:0
done
