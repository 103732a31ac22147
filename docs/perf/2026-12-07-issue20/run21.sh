#!/bin/bash
# Device run 21 (issue 19): the Qwen3-14B decode layer with fewer launches.
# Usage (device): bash docs/perf/2026-12-07-issue20/run21.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
B=./target/release/tessel_s
# The decode layer without the `attn` copy kernel (fuse rule 11: an output over a
# materialised value is its buffer) and with launches merged (merge-launches: q, k, v GEMVs
# as one launch, the two cache updates as one), a build of the working tree as
# target/release/tessel_r11_s: GPU checks, then the same bench with and without merging.
N=./target/release/tessel_r11_s
for p in fast exact; do for T in 1 3; do
  TMO=60 t r11_check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=2 --dim T=$T --dim S=96
done; done
TMO=60 t r11_check $N check tests/programs/attention_bench.tsl --step decode --profile fast --dim B=3 --dim N=1 --dim S=300 --fill len=iota:250
for tool in memcheck racecheck; do
  TMO=90 t r11_check compute-sanitizer --tool $tool --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=2 --dim T=1 --dim S=96 -o /tmp/r11.safetensors
done
for b in 1 8; do
  TMO=60 t cli_decode $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21
  TMO=60 t cli_decode $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21 --no-merge-launches
done
# The same at HEAD (before either change), for a same-machine comparison.
for b in 1 8; do
  TMO=60 t cli_decode_head $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21
done
# The LoRA layer's forward and backward (tessel.lora's companion steps, T = 2048, 5120 -> 5120,
# r = 16) per kernel, in invariant and fast, at HEAD and with the working tree (which stores
# the base product in bf16 instead of f32).
F=docs/perf/2026-12-07-issue20/lora_companion.tsl
for p in invariant fast; do for s in forward backward; do
  TMO=60 t lora_bench $B bench $F --step $s --profile $p --dim T=2048 --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
  TMO=60 t lora_bench $N bench $F --step $s --profile $p --dim T=2048 --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
done; done
