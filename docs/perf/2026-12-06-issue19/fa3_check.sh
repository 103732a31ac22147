#!/bin/bash
# Device check of the FlashAttention-3 structure of the wgmma attention tile (issue 19,
# branch fa3: a TMA producer warpgroup with setmaxnreg feeding two consumer warpgroups
# through an mbarrier ring, ping-pong between the consumers at named barriers).
# Binary: B = target/release/tessel_s, a stripped release build of branch fa3.
#   1. tessel check of the new tile (GPU vs the executor and the reference): causal GQA
#      with tails (d 128), d 64, the q prologue (d 128 and 64, odd T), f16 without a mask
#      (odd S, T), T = 1, a cache bound crossing a key block (the producer's cp.async
#      block), the small Qwen3 layer; explain of the T = 2048 prefill (registers, spills);
#   2. compute-sanitizer memcheck, racecheck and synccheck on small attention runs;
#   3. bench: the Qwen3-14B prefill layer at T = 2048 and the attention alone
#      (tests/programs/attention_bench.tsl, as runs 8/9) at T = 2048 and 4096, each with
#      and without --wgmma-attention (and with --wgmma-attention-keys 128), in one run on
#      one card.
# Usage (device): bash docs/perf/2026-12-06-issue19/fa3_check.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
A="tests/programs/attention.tsl --profile fast --wgmma-attention"
# 1. check
t check $B check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
t check $B check $A --step prefill --dim T=300 --dim H=4 --dim KV=2 --dim D=128 --wgmma-attention-keys 128
t check $B check $A --step prefill --dim T=70 --dim H=8 --dim KV=1 --dim D=64
t check $B check $A --step prefill --dim T=1 --dim H=4 --dim KV=2 --dim D=64
t check $B check $A --step prologue --dim T=100 --dim H=4 --dim KV=2 --dim D=128
t check $B check $A --step prologue --dim T=77 --dim H=4 --dim KV=1 --dim D=64
t check $B check $A --step full_f16 --dim H=2 --dim T=70 --dim S=200 --dim D=128
t check $B check $A --step full_f16 --dim H=3 --dim T=33 --dim S=129 --dim D=64
t check $B check $A --step decode --dim B=1 --dim N=70 --dim H=4 --dim KV=1 --dim S=256 --dim D=64
t check $B check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=130 --fill pos=iota:0 --wgmma-attention
t check $B check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=70 --fill pos=iota:131000 --wgmma-attention
t explain $B explain examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --wgmma-attention
t explain $B explain tests/programs/attention_bench.tsl --step prefill --profile fast --dim T=2048 --wgmma-attention
# 2. compute-sanitizer
S() { local tool=$1; shift; TMO=120 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run "$@" -o /tmp/fa3_$tool.safetensors; }
S memcheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S racecheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S synccheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S memcheck $A --step prologue --dim T=77 --dim H=4 --dim KV=1 --dim D=64
S racecheck $A --step decode --dim B=1 --dim N=70 --dim H=4 --dim KV=1 --dim S=256 --dim D=64
S memcheck $A --step decode --dim B=1 --dim N=70 --dim H=4 --dim KV=1 --dim S=256 --dim D=64
# 3. bench (baseline first, same card, same run)
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0"
t prefill $B bench $F
t prefill $B bench $F --wgmma-attention
t prefill $B bench $F --wgmma-attention --wgmma-attention-keys 128
AB="tests/programs/attention_bench.tsl --step prefill --profile fast"
for T in 2048 4096; do
  t attention $B bench $AB --dim T=$T
  t attention $B bench $AB --dim T=$T --wgmma-attention
  t attention $B bench $AB --dim T=$T --wgmma-attention --wgmma-attention-keys 128
done
grep -h "PASS\|FAIL\|rc \|ERROR SUMMARY\|error" $L/check.txt $L/sanitizer.txt > $L/summary.txt 2>&1
