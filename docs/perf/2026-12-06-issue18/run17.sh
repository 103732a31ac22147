#!/bin/bash
# Device run 17 (one GPU; the card is in logs/nvidia-smi.txt): silu_f32 without a branch
# (the gate GEMM's epilogue), against the session's start on the same card.
#   B  = target/release/tessel_s (silu_f32 straight-line), B0 = target/release/tessel_base_s (0e51af4)
#   1. bench the Qwen3-14B prefill layer at T = 2048 (B0 then B): the gate (prefill_11) and
#      up (prefill_12) GEMMs; Nsight Compute's instruction counts of both (B);
#   2. tessel check (B): swiglu T = 64 and the small Qwen3 layer in exact, invariant, fast;
#   3. the Qwen3-14B prefill layer against transformers (tests/gpu/run_hf_checks.sh, fast).
# Usage (device): bash docs/perf/2026-12-06-issue18/run17.sh   (writes under $OUT)
B=./target/release/tessel_s
B0=./target/release/tessel_base_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for bin in $B0 $B; do
  TMO=150 t bench $bin bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
done
timeout 200 ncu --kernel-name regex:'prefill_1[12]$' --launch-count 2 --section SpeedOfLight --section WarpStateStats --section InstructionStats $B run examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 -o /tmp/l.safetensors > $L/ncu_gate_up.txt 2>&1
for p in exact invariant fast; do
  TMO=90 t check $B check examples/qwen3_14b/swiglu.tsl --profile $p --dim T=64
  TMO=90 t check $B check tests/programs/layer_small.tsl --step qwen3 --profile $p --dim T=40 --fill pos=iota:0
done
CASES=prefill TESSEL_ARGS="--profile fast" timeout 150 bash tests/gpu/run_hf_checks.sh $B $OUT/hf qwen3_14b > $L/hf.txt 2>&1; echo "rc $?" >> $L/hf.txt
cp $OUT/hf/summary.txt $L/hf_summary.txt 2>/dev/null
rm -rf $OUT/hf
