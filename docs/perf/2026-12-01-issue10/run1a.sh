#!/bin/bash
# Issue 10, device run 1a (one H200): the ranks on the GPU — NCCL at world size 1,
# every rank on GPU 0 in turn (loopback) at 2/4/8 — bits across world sizes, against the
# executor's digests, speed at --tp 1 against the step as written, and memcheck.
# Usage (device): bash docs/perf/2026-12-01-issue10/run1a.sh  (writes under $OUT)
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
# 1. small programs: digests (exact) to compare with the executor's, NCCL at 1, loopback 2/4
for n in 1 2 4; do TMO=90 t small_run $B run tests/programs/layer_tp.tsl --step prefill --dim T=8 --tp $n -o /tmp/o.safetensors; done
TMO=90 t small_run $B run tests/programs/layer_small.tsl --step qwen3_decode --dim B=3 --dim T=2 --dim S=24 --tp 2 -o /tmp/o.safetensors
for p in exact invariant fast; do
  TMO=90 t small_tp $B tp-check tests/programs/layer_small.tsl --dim B=3 --dim T=2 --dim S=24 --sizes 1,2 --profile $p
  TMO=90 t small_tp $B tp-check tests/programs/layer_tp.tsl --step prefill --dim T=37 --sizes 1,2,4 --profile $p
done
# 4. memcheck: loopback ranks and NCCL at 1
TMO=120 t sanitizer compute-sanitizer --tool memcheck $B run tests/programs/layer_small.tsl --step qwen3_decode --dim B=3 --dim T=2 --dim S=24 --tp 2 -o /tmp/o.safetensors
TMO=120 t sanitizer compute-sanitizer --tool memcheck $B run tests/programs/layer_tp.tsl --step prefill --dim T=37 --tp 1 -o /tmp/o.safetensors
TMO=120 t sanitizer compute-sanitizer --tool racecheck $B run tests/programs/layer_tp.tsl --step prefill --dim T=37 --tp 4 -o /tmp/o.safetensors
# 3. speed: Qwen3-32B prefill T=2048 and T=8, as written and as ranks at --tp 1 over NCCL
for T in 2048 8; do
  TMO=120 t bench $B bench examples/qwen3_32b/layer.tsl --step prefill --dim T=$T --profile invariant --rounds 20
  TMO=120 t bench $B bench examples/qwen3_32b/layer.tsl --step prefill --dim T=$T --profile invariant --rounds 20 --tp 1
  TMO=120 t bench $B bench examples/qwen3_32b/layer.tsl --step prefill --dim T=$T --profile invariant --rounds 20 --tp 2
done
cd $OUT && tar czf logs.tgz logs && rm -rf logs
