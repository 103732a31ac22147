#!/bin/bash
# Issue 10, device run 3a (one H200), final binary: the whole step timed also as a CUDA
# graph (as written, and the ranks at --tp 1 over NCCL), Qwen3-32B prefill T = 2048 and
# T = 8, decode B = 1, T = 1, S = 4096; every layer's bits across world sizes again.
# Usage (device): bash docs/perf/2026-12-01-issue10/run3a.sh  (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
lib=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
mkdir -p /tmp/nccl && ln -sf "$lib" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for s in "prefill --dim T=2048" "prefill --dim T=8" "decode --dim B=1 --dim T=1 --dim S=4096"; do
  t bench $B bench examples/qwen3_32b/layer.tsl --step $s --profile invariant --rounds 20
  t bench $B bench examples/qwen3_32b/layer.tsl --step $s --profile invariant --rounds 20 --tp 1
done
t layers $B tp-check examples/qwen3_14b/layer.tsl --step prefill --dim T=128 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile exact
t layers $B tp-check examples/qwen2_5_14b/layer.tsl --step prefill --dim T=128 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen2_5_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_32b/layer.tsl --step prefill --dim T=2048 --sizes 1,2,4,8 --profile invariant
t layers $B tp-check examples/qwen3_32b/layer.tsl --step decode --dim B=1 --dim T=8 --dim S=4096 --sizes 1,2,4,8 --profile invariant
cd $OUT && tar czf logs.tgz logs && rm -rf logs
