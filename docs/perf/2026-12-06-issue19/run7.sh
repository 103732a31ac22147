#!/bin/bash
# Device run 7 of issue 19 (third session; run 6 never got a machine): against the
# session-start binary on the same card, in the same run —
#   B0 = target/release/tessel_b0_s   0f7175e (session start)
#   B  = target/release/tessel_s      main with the ping-pong branch merged: silu_f32 by a
#        Newton–Raphson reciprocal; SIMT GEMV unroll; invariant split-K by N; invariant
#        wgmma for every M; the persistent ping-pong wgmma tile (--wgmma-pingpong, opt-in);
#        and the wgmma attention tile (--wgmma-attention, opt-in; branch wgmma-attn merged)
#   1. tessel check (B): the wgmma attention tile (d 128 and 64: the V descriptor's panel
#      strides; the q prologue; tails), the ping-pong tile with tails, its silu epilogue
#      and a small layer;
#      the GEMV in exact (GPU bits = executor) with a K remainder;
#   2. racecheck and memcheck on the ping-pong and wgmma attention kernels;
#   3. tessel invariance on the GPU where the invariant wgmma tiles run;
#   4. bench: Qwen3-14B prefill T = 2048 (fast: B0, B, B --wgmma-pingpong, with
#      --wgmma-attention too, and with --wgmma-tma; invariant: B0, B), decode B = 1 and 8
#      over S = 4096 (fast: B0, B);
#   5. the HF Qwen3-14B decode step under torch.compile (what time is left).
# Usage (device): bash docs/perf/2026-12-06-issue19/run7.sh   (writes under $OUT)
B=./target/release/tessel_s
B0=./target/release/tessel_b0_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
A="tests/programs/attention.tsl --profile fast --wgmma-attention"
t check $B check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
t check $B check $A --step prefill --dim T=70 --dim H=8 --dim KV=1 --dim D=64
t check $B check $A --step prologue --dim T=100 --dim H=4 --dim KV=2 --dim D=128
t check $B check $A --step full_f16 --dim H=2 --dim T=70 --dim S=200 --dim D=128
t check $B check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=130 --fill pos=iota:0 --wgmma-attention
P="--profile fast --wgmma-pingpong"
t check $B check tests/programs/matmul.tsl --step linear $P --dim M=1030 --dim K=600 --dim N=4100
t check $B check tests/programs/gemm_math_epilogue.tsl --step gate $P --dim M=1030 --dim K=136 --dim N=4224
t check $B check tests/programs/layer_small.tsl --step qwen3 $P --dim T=300 --fill pos=iota:0
t check $B explain tests/programs/matmul.tsl --step linear $P --dim M=1030 --dim K=600 --dim N=4100
t check $B check tests/programs/matmul.tsl --step linear --profile exact --dim M=1 --dim K=2816 --dim N=5000
t check $B check tests/programs/matmul.tsl --step linear --profile fast --dim M=1 --dim K=17408 --dim N=5120
TMO=60 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run tests/programs/matmul.tsl --step linear $P --dim M=1030 --dim K=136 --dim N=4224 -o /tmp/r.safetensors
TMO=40 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run tests/programs/gemm_math_epilogue.tsl --step gate $P --dim M=1030 --dim K=136 --dim N=4224 -o /tmp/m.safetensors
TMO=60 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128 -o /tmp/ra.safetensors
TMO=40 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $A --step prologue --dim T=100 --dim H=4 --dim KV=2 --dim D=128 -o /tmp/ma.safetensors
t invariance $B invariance tests/programs/matmul.tsl --step linear --profile invariant --batch-dim M --sizes 1,3,64,65,200,1030 --dim K=5120 --dim N=5120
t invariance $B invariance tests/programs/layer_small.tsl --step qwen3_decode --profile invariant --batch-dim B --sizes 1,3,8,17,40 --dim T=2 --dim S=96
F="examples/qwen3_14b/layer.tsl --step prefill --dim T=2048 --fill pos=iota:0"
t prefill $B0 bench $F --profile fast
t prefill $B bench $F --profile fast
t prefill $B bench $F --profile fast --wgmma-pingpong
t prefill $B bench $F --profile fast --wgmma-pingpong --wgmma-attention
t prefill $B bench $F --profile fast --wgmma-pingpong --wgmma-tma --wgmma-attention
t prefill $B0 bench $F --profile invariant
t prefill $B bench $F --profile invariant
D="examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --rounds 21"
for bin in $B0 $B; do
  t decode $bin bench $D --dim B=1 --fill len=iota:4095
  t decode $bin bench $D --dim B=8 --fill len=iota:4088
done
TMO=150 t torch python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases decode --rounds 20
