#!/bin/bash
# Issue 10, device run 1b (one H200): the ranks on the GPU — NCCL at world size 1,
# every rank on GPU 0 in turn (loopback) at 2/4/8 — bits across world sizes, against the
# executor's digests, speed at --tp 1 against the step as written, and memcheck.
# Usage (device): bash docs/perf/2026-12-01-issue10/run1b.sh  (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
# The pip wheel ships libnccl.so.2 only; cudarc looks for libnccl.so.
lib=$(find / -name 'libnccl.so.2' -not -path '*/proc/*' 2>/dev/null | head -1)
echo "libnccl: $lib" | tee $L/nccl.txt
mkdir -p /tmp/nccl && ln -sf "$lib" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
python3 -c "import torch; print('nccl', torch.cuda.nccl.version())" >> $L/nccl.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
# 3. rank 0's kernels timed one at a time (Qwen3-32B prefill T=2048, --tp 1 over NCCL)
TMO=100 t bench $B bench examples/qwen3_32b/layer.tsl --step prefill --dim T=2048 --profile invariant --rounds 20 --tp 1
# 2. whole layers, bits across world sizes (loopback at 2/4/8; NCCL at 1)
TMO=100 t layers $B tp-check examples/qwen3_14b/layer.tsl --step prefill --dim T=128 --sizes 1,2,4,8 --profile invariant
TMO=100 t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile invariant
TMO=100 t layers $B tp-check examples/qwen3_14b/layer.tsl --step decode --dim B=2 --dim T=2 --dim S=256 --sizes 1,2,4,8 --profile exact
TMO=100 t layers $B tp-check examples/qwen2_5_14b/layer.tsl --step prefill --dim T=128 --sizes 1,2,4,8 --profile invariant
TMO=100 t layers $B tp-check examples/qwen3_32b/layer.tsl --step prefill --dim T=2048 --sizes 1,2,4,8 --profile invariant
TMO=100 t layers $B tp-check examples/qwen3_32b/layer.tsl --step decode --dim B=1 --dim T=8 --dim S=4096 --sizes 1,2,4,8 --profile invariant
cd $OUT && tar czf logs.tgz logs && rm -rf logs
