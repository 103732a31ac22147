#!/bin/bash
# Issue 10, device run 5 (one H200), the session's last binary: layers' bits across world
# sizes, generated blocks on the GPU, and the trials' wrong-answer program (an update
# returned under a parameter's name) run with and without --tp.
# Usage (device): bash docs/perf/2026-12-01-issue10/run5.sh  (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
lib=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
mkdir -p /tmp/nccl && ln -sf "$lib" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
cat > /tmp/slot.tsl <<'TSL'
step s(x: f32[T, 32], w1: f32[64, 32], w2: f32[32, 64], out1: f32[T, 32], c: inout f32[T, 32]) -> (f32[T, 32], f32[T, 32]) {
    ((x @ w1^T) @ w2^T + out1, update(c, x, at: 0, axis: 1))
}
TSL
t slot $B run /tmp/slot.tsl --dim T=3 -o /tmp/a.safetensors
t slot $B run /tmp/slot.tsl --dim T=3 --tp 1 -o /tmp/b.safetensors
t slot $B run /tmp/slot.tsl --dim T=3 --tp 4 -o /tmp/c.safetensors
t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile exact
t layers $B tp-check examples/qwen3_32b/layer.tsl --step prefill --dim T=2048 --sizes 1,2,4,8 --profile invariant
TMO=120 t fuzz $B fuzz --tp --count 12 --seed 300000
cd $OUT && tar czf logs.tgz logs && rm -rf logs
