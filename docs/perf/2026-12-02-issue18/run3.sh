#!/bin/bash
# Issue 18, device run 3 (one H200): the Qwen3-14B LoRA training step against PEFT on
# transformers' Qwen3DecoderLayer (torch autograd), T = 2048 and 77, rank 16, invariant and
# fast profiles (tests/gpu/run_lora_checks.sh), then the torch baselines (bench_lora.py).
# Usage (device): bash docs/perf/2026-12-02-issue18/run3.sh   (writes under $OUT)
B=./target/release/tessel_s
PROFILES="invariant fast" bash tests/gpu/run_lora_checks.sh $B /tmp/lora qwen3_14b > $OUT/run_lora.log 2>&1; rc=$?
mkdir -p $OUT/lora; cp /tmp/lora/*.log /tmp/lora/summary.txt /tmp/lora/environment.txt $OUT/lora/ 2>/dev/null
for d in /tmp/lora/*/; do n=$(basename $d); [ $n = checkpoint ] && continue; [ $n = weights ] && continue; mkdir -p $OUT/lora/$n; cp $d/meta.json $d/compare.*.json $OUT/lora/$n/ 2>/dev/null; done
echo rc=$rc
tar czf $OUT/lora.tgz -C $OUT lora run_lora.log; rm -rf $OUT/lora
