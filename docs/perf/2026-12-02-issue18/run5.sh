#!/bin/bash
# Issue 18, device run 5 (one H200): the torch baselines and tessel side by side.
# Usage (device): bash docs/perf/2026-12-02-issue18/run5.sh   (writes under $OUT/b)
mkdir -p $OUT/b
python3 tests/gpu/bench_lora.py --cases copy,delta,seed --json $OUT/b/bench_lora_delta.json > $OUT/b/delta.txt 2>&1
python3 tests/gpu/bench_lora.py --cases layer --json $OUT/b/bench_lora_layer.json > $OUT/b/layer.txt 2>&1
B=./target/release/tessel_s
for p in exact fast; do
  $B bench examples/lora/lora_grad_f32.tsl --profile $p --dim M=8192 --dim K=4096 --dim N=4096 --dim R=16 2>&1 | grep -E "graph|whole" >> $OUT/b/tessel.txt
done
$B bench examples/lora/qwen3_14b_lora.tsl --step grads --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0 2>&1 | grep -E "graph|whole" >> $OUT/b/tessel.txt
