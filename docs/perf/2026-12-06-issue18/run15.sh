#!/bin/bash
# Issue 18, device run 15 (asked for an H200; an H100 80GB HBM3 came): the attention backward with the program's exp as
# exp_f32 and one 16-column loop body per block (rolled sub-blocks), at several block
# widths (TESSEL_BWD_BLOCK=dq,dkv: a temporary patch of schedule/attention.rs `choose_bwd`
# reading the widths from the environment, used for this run only and not committed).
#   1. tessel check on the GPU of the backward at small shapes at the widths tried;
#   2. bench prefill_grads (40/8 heads, d 128, causal) at T = 2048 per width and at 4096 for
#      two, beside torch SDPA's backward in the same run; the Qwen3-14B LoRA train step;
#   3. Nsight Compute on the dq and dkv kernels at T = 2048.
# Usage (device): bash docs/perf/2026-12-06-issue18/run15.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== ${TESSEL_BWD_BLOCK:-default} $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for w in 16,32 32,32 64,32 64,64; do
  export TESSEL_BWD_BLOCK=$w
  for p in invariant fast; do
    TMO=120 t check $B check tests/programs/grad_small.tsl --step attention_grads --profile $p --dim T=130
  done
  TMO=150 t check $B check tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=200
  TMO=200 t bench $B bench tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=2048
done
unset TESSEL_BWD_BLOCK
TMO=200 t sdpa python3 tests/gpu/sdpa_bench.py $L/sdpa_backward.json --backward
for w in 16,32 64,64; do
  export TESSEL_BWD_BLOCK=$w
  TMO=200 t bench $B bench tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=4096
done
export TESSEL_BWD_BLOCK=64,32
TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step train --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
mkdir -p $OUT/ncu
for k in prefill_grads_0 prefill_grads_1; do
  timeout 240 ncu --kernel-name $k --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section SchedulerStats $B run tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=2048 -o /tmp/ncu.safetensors > $OUT/ncu/$k.txt 2>&1
done
