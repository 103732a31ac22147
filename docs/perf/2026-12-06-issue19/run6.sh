#!/bin/bash
# Device run 6 of issue 19 (third session): silu_f32 without divisions and the unrolled SIMT
# GEMV, each against the session-start binary on the same card in the same run.
#   B0 = target/release/tessel_b0_s   0f7175e (session start)
#   B  = target/release/tessel_s      d0f677b: silu_f32 by a Newton–Raphson reciprocal; GEMV
#                                     unroll; invariant split-K by N; invariant wgmma
#   1. tessel check (B): the GEMV in exact (GPU bits = executor) with a K remainder, fast at
#      decode shapes; the silu epilogue (gate) and a small layer in fast;
#   2. bench the Qwen3-14B prefill layer (T = 2048) and decode layer (B = 1 and 8, S = 4096)
#      with B0 and B;
#   3. invariant: tessel invariance on the GPU where the invariant wgmma tiles run (a GEMM
#      over M = 1..1030, the small decode layer over B), and the 14B prefill in invariant;
#   4. the HF Qwen3-14B decode step, plain and torch.compile + CUDA graph (bench_torch.py).
# Usage (device): bash docs/perf/2026-12-06-issue19/run6.sh   (writes under $OUT)
B=./target/release/tessel_s
B0=./target/release/tessel_b0_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-200} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
t check $B check tests/programs/matmul.tsl --step linear --profile exact --dim M=1 --dim K=2816 --dim N=5000
t check $B check tests/programs/matmul.tsl --step linear --profile exact --dim M=3 --dim K=1001 --dim N=777
t check $B check tests/programs/matmul.tsl --step linear --profile fast --dim M=1 --dim K=17408 --dim N=5120
t check $B check tests/programs/gemm_math_epilogue.tsl --step gate --profile fast --dim M=1030 --dim K=136 --dim N=4100
t check $B check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=300 --fill pos=iota:0
t invariance $B invariance tests/programs/matmul.tsl --step linear --profile invariant --batch-dim M --sizes 1,3,64,65,200,1030 --dim K=5120 --dim N=5120
t invariance $B invariance tests/programs/matmul.tsl --step linear_epilogue --profile invariant --batch-dim M --sizes 1,7,64,65,300 --dim K=136 --dim N=4100
t invariance $B invariance tests/programs/layer_small.tsl --step qwen3_decode --profile invariant --batch-dim B --sizes 1,3,8,17,40 --dim T=2 --dim S=96
for bin in $B0 $B; do
  t prefill $bin bench examples/qwen3_14b/layer.tsl --step prefill --profile invariant --dim T=2048 --fill pos=iota:0
  t prefill $bin bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
  t decode $bin bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim B=1 --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21
  t decode $bin bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim B=8 --dim T=1 --dim S=4096 --fill len=iota:4088 --rounds 21
done
TMO=240 t torch python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases decode --rounds 20
