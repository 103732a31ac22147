#!/bin/bash
# Issue 17, device run 1 (one H200): the Llama-3-8B layer written in the batched form
# (examples/llama3_8b/layer.tsl) against transformers' LlamaDecoderLayer (eager and SDPA;
# prefill T = 2048 as a batch of one, decode B = 1 and 8 with T = 1 and 8 over a cache of
# 4096), in the fast and invariant profiles; then its speed beside transformers' layer
# (tests/gpu/bench_torch.py) and a batched GEMM beside cuBLAS.
# Usage (device): bash docs/perf/2026-12-02-issue17/run1.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
export PYTHONUNBUFFERED=1
# 1. against transformers (a seeded checkpoint of layers 0 and 1 in 3 shards, layer 1 run)
for p in fast invariant; do
  TMO=240 TESSEL_ARGS="--profile $p" CASES="prefill decode" t hf_$p bash tests/gpu/run_hf_checks.sh $B $OUT/hf_$p llama3_8b
  cp $OUT/hf_$p/summary.txt $L/hf_${p}_summary.txt 2>/dev/null
  rm -rf $OUT/hf_$p/checkpoint
done
# 2. speed: the layer as one CUDA graph and per kernel, beside transformers' layer
TMO=150 t bench $B bench examples/llama3_8b/layer.tsl --step prefill --profile fast --dim B=1 --dim T=2048 --rounds 11
TMO=150 t bench $B bench examples/llama3_8b/layer.tsl --step decode --profile fast --dim B=1 --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21
TMO=150 t bench $B bench examples/llama3_8b/layer.tsl --step decode --profile fast --dim B=8 --dim T=1 --dim S=4096 --fill len=iota:4088 --rounds 21
TMO=200 t torch python3 tests/gpu/bench_torch.py --config examples/llama3_8b/config.json --cases copy,prefill,decode
cd $OUT && tar czf logs.tgz logs && rm -rf logs
