#!/bin/bash
# Issue 10, device run 2 (one H200), after the plan moved before the attention pass (each
# rank's attention fused): bits across world sizes for every layer, prefill and decode;
# speed of the ranks at --tp 1 over NCCL against the step as written (Qwen3-32B prefill at
# T = 2048 and T = 8, decode B = 1, T = 1, S = 4096); memcheck and racecheck.
# Usage (device): bash docs/perf/2026-12-01-issue10/run2.sh  (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
lib=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
mkdir -p /tmp/nccl && ln -sf "$lib" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
# speed
for T in 2048 8; do
  t bench $B bench examples/qwen3_32b/layer.tsl --step prefill --dim T=$T --profile invariant --rounds 20
  t bench $B bench examples/qwen3_32b/layer.tsl --step prefill --dim T=$T --profile invariant --rounds 20 --tp 1
done
t bench $B bench examples/qwen3_32b/layer.tsl --step decode --dim B=1 --dim T=1 --dim S=4096 --profile invariant --rounds 20
t bench $B bench examples/qwen3_32b/layer.tsl --step decode --dim B=1 --dim T=1 --dim S=4096 --profile invariant --rounds 20 --tp 1
# digests of small programs in exact (the executor's are in docs/tensor-parallel.md)
for n in 1 2 4; do t small $B run tests/programs/layer_tp.tsl --step prefill --dim T=8 --tp $n -o /tmp/o.safetensors; done
t small $B run tests/programs/layer_small.tsl --step qwen3_decode --dim B=3 --dim T=2 --dim S=24 --tp 2 -o /tmp/o.safetensors
# bits across world sizes
t layers $B tp-check examples/qwen3_14b/layer.tsl --step prefill --dim T=128 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile exact
t layers $B tp-check examples/qwen2_5_14b/layer.tsl --step prefill --dim T=128 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_32b/layer.tsl --step prefill --dim T=2048 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_32b/layer.tsl --step decode --dim B=1 --dim T=8 --dim S=4096 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check tests/programs/layer_tp.tsl --step prefill --dim T=37 --sizes 1,2,4 --profile invariant
# sanitizers
t sanitizer compute-sanitizer --tool memcheck $B run examples/qwen3_14b/layer.tsl --step prefill --dim T=128 --tp 2 --profile invariant -o /tmp/o.safetensors
t sanitizer compute-sanitizer --tool memcheck $B run examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --tp 4 --profile invariant -o /tmp/o.safetensors
t sanitizer compute-sanitizer --tool racecheck $B run tests/programs/layer_tp.tsl --step prefill --dim T=37 --tp 2 --profile invariant -o /tmp/o.safetensors
cd $OUT && tar czf logs.tgz logs && rm -rf logs
