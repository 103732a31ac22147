#!/bin/bash
# Issue 10, device run 3b (one H200), final binary: generated transformer blocks run as
# ranks on the GPU (tessel fuzz --tp: 1, 2, 4 ranks; exact against the executor); memcheck
# of ranks over NCCL at one rank and on one GPU in turn.
# Usage (device): bash docs/perf/2026-12-01-issue10/run3b.sh  (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
lib=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
mkdir -p /tmp/nccl && ln -sf "$lib" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=300 t fuzz $B fuzz --tp --count 30 --seed 100000
t sanitizer compute-sanitizer --tool memcheck $B run examples/qwen2_5_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --tp 2 --profile invariant -o /tmp/o.safetensors
t sanitizer compute-sanitizer --tool memcheck $B run tests/programs/layer_small.tsl --step qwen3_decode --dim B=3 --dim T=2 --dim S=24 --tp 1 -o /tmp/o.safetensors
cd $OUT && tar czf logs.tgz logs && rm -rf logs
