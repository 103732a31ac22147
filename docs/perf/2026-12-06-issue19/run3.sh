#!/bin/bash
# Device run 3 of issue 19's second session: the 128 x 128 wgmma tile and the unrolled
# math epilogue, measured against run 2's binary on the same card, beside torch.compile.
#   B  = target/release/tessel_s     128 x 256 or 128 x 128 wgmma tile by wave count; 128 x 128
#                                    with 3 stages, 2 CTAs per SM; looped epilogues 4 passes
#                                    an iteration
#   W4 = target/release/tessel_w4_s  the same, but 128 x 128 with 4 stages, 1 CTA per SM
#   R2 = target/release/tessel_r2_s  run 2's binary (128 x 256 only, 1 pass an iteration)
#   1. tessel check (B, fast) where the 128 x 128 tile and the unrolled silu epilogue run,
#      racecheck on it, and the small layers in fast;
#   2. bench the Qwen3-14B prefill layer at T = 2048 (R2, W4, B) and the Qwen3-32B one (B);
#   3. the HF Qwen3-14B layer under torch.compile (tests/gpu/bench_torch.py --cases prefill).
# (Trimmed to fit the session's device time: no HF comparison, no 32B torch.compile.)
# Usage (device): bash docs/perf/2026-12-06-issue19/run3.sh   (writes under $OUT)
B=./target/release/tessel_s
W4=./target/release/tessel_w4_s
R2=./target/release/tessel_r2_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-200} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
M="--profile fast"
t check $B check tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=264 --dim N=4100
t check $B check tests/programs/gemm_math_epilogue.tsl --step gate $M --dim M=1030 --dim K=136 --dim N=4100
t check $B check tests/programs/layer_small.tsl --step qwen3 $M --dim T=300 --fill pos=iota:0
t check $B explain tests/programs/gemm_math_epilogue.tsl --step gate $M --dim M=1030 --dim K=136 --dim N=4100
TMO=120 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run tests/programs/gemm_math_epilogue.tsl --step gate $M --dim M=1030 --dim K=72 --dim N=4100 -o /tmp/r.safetensors
TMO=60 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run tests/programs/gemm_math_epilogue.tsl --step gate $M --dim M=1030 --dim K=136 --dim N=4100 -o /tmp/m.safetensors
for bin in $R2 $W4 $B; do
  t bench $bin bench examples/qwen3_14b/layer.tsl --step prefill $M --dim T=2048 --fill pos=iota:0
done
t bench $B bench examples/qwen3_32b/layer.tsl --step prefill $M --dim T=2048 --fill pos=iota:0
TMO=150 t torch python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases prefill --rounds 20
