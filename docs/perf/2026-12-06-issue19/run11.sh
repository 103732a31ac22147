#!/bin/bash
# Device run 11 of issue 19 (fourth session): the ping-pong GEMM as fast's default (253394a),
# the attention heads' permute written once (6db9dc7), attention past 2^32 scores (452e9b4),
# against the session's starting binary (a24d845).
#   A = target/release/tessel_a24_s   a24d845
#   B = target/release/tessel_s       this session's binary (see the note in the perf doc)
#   1. tessel check (B): the small layers (prefill and decode, fast and exact), where the
#      attention output is now one kernel; a GPU fuzz batch in fast with the defaults;
#   2. attention at T = 16384 (B): tests/gpu/attention_long.py against an f32 reference
#      beside SDPA; its time (bench) beside SDPA's (sdpa_bench.py, now with 16384);
#   3. bench the Qwen3-14B prefill (T = 2048) and decode (B = 1, 8) layers, A then B;
# Usage (device): bash docs/perf/2026-12-06-issue19/run11.sh   (writes under $OUT)
B=./target/release/tessel_s
A=./target/release/tessel_a24_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in fast exact; do
  t check $B check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=3 --dim T=2 --dim S=96
  t check $B check tests/programs/layer_small.tsl --step qwen3 --profile $p --dim T=77 --fill pos=iota:0
done
TMO=120 t fuzz $B fuzz --count 150 --seed 560000 --profile fast
python3 tests/gpu/attention_long.py make /tmp/q16k.safetensors 16384 > $L/attention_long.txt 2>&1
t attention_long $B run tests/programs/attention_bench.tsl --step prefill --profile fast --dim T=16384 --inputs /tmp/q16k.safetensors -o /tmp/o16k.safetensors
python3 tests/gpu/attention_long.py judge /tmp/q16k.safetensors /tmp/o16k.safetensors >> $L/attention_long.txt 2>&1; echo "rc $?" >> $L/attention_long.txt
t attention $B bench tests/programs/attention_bench.tsl --step prefill --profile fast --dim T=16384
timeout 150 python3 tests/gpu/sdpa_bench.py $L/sdpa.json > $L/sdpa.txt 2>&1
for bin in $A $B; do
  t prefill $bin bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
done
D="examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --rounds 21"
for bin in $A $B; do
  t decode $bin bench $D --dim B=1 --fill len=iota:4095
  t decode $bin bench $D --dim B=8 --fill len=iota:4088
done
# 4. the six LoRA GEMMs in TF32 (fast) beside cuBLAS (TF32 tensor cores), M = 8192, K = N = 4096, r = 16.
TMO=150 t lora $B bench examples/lora/lora_grad_f32.tsl --profile fast --dim M=8192 --dim K=4096 --dim N=4096 --dim R=16
# 5. Experiment: the decode split attention with shorter key ranges in fast (B = 1): X1 =
#    ranges down to 64 keys (512 CTAs), X2 = down to 32 keys while under four CTAs per SM
#    (1024 CTAs); binaries built from B with only those two constants changed.
for bin in ./target/release/tessel_x1_s ./target/release/tessel_x2_s; do
  t decode $bin bench $D --dim B=1 --fill len=iota:4095
done
