#!/bin/bash
# Issue 10, device run 4 (one H200): the NCCL path after its refactor into one helper
# (on_every_rank) — run, bench (with the all-gather timings) and tp-check at --tp 1 over NCCL.
# Usage (device): bash docs/perf/2026-12-01-issue10/run4.sh  (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
lib=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
mkdir -p /tmp/nccl && ln -sf "$lib" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; timeout 100 "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
t nccl $B run tests/programs/layer_small.tsl --step qwen3_decode --dim B=3 --dim T=2 --dim S=24 --tp 1 -o /tmp/o.safetensors
t nccl $B bench tests/programs/layer_tp.tsl --step prefill --dim T=64 --profile invariant --rounds 5 --tp 1
t nccl $B tp-check tests/programs/layer_tp.tsl --step prefill --dim T=37 --sizes 1,2,4 --profile exact
cd $OUT && tar czf logs.tgz logs && rm -rf logs
