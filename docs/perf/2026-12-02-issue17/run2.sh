#!/bin/bash
# Issue 17, device run 2 (one H200): the new ops on the GPU.
#   1. tests/gpu/torch_ops.py: every op a porter reaches for against PyTorch on the GPU, bit
#      for bit (exact and fast profiles);
#   2. tessel check of the ops' test programs: GPU against the executor (bits in exact) and
#      both judged by the dtype-following reference, at odd shapes, every profile;
#   3. the fuzzer on the GPU (new ops drawn by the generator) and the regression corpus;
#   4. compute-sanitizer memcheck on the gather, scan and elementwise programs (out-of-range
#      indices are clamped: nothing may read outside a buffer) and the small Llama layer.
# Usage (device): bash docs/perf/2026-12-02-issue17/run2.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
export PYTHONUNBUFFERED=1
for p in exact fast; do
  TMO=200 t torch_ops_$p python3 tests/gpu/torch_ops.py --tessel $B --out /tmp/torch_ops_$p --profile $p --json $L/torch_ops_$p.json
done
P="tests/programs/elementwise_ops.tsl tests/programs/gather.tsl tests/programs/select_scan.tsl"
for p in exact invariant fast; do
  for dims in "T=7 --dim D=33 --dim V=50 --dim H=33 --dim B=3" "T=1 --dim D=129 --dim V=1 --dim H=8 --dim B=1" "T=64 --dim D=1000 --dim V=300 --dim H=130 --dim B=2"; do
    TMO=150 t check $B check $P --profile $p --dim $dims
  done
done
TMO=120 t check $B check tests/programs/layer_small.tsl --dim B=2 --dim T=7 --dim S=40 --profile invariant
TMO=240 t fuzz bash scripts/gpu-fuzz.sh $B $OUT/fuzz 150 17000
cp $OUT/fuzz/*.log $L/ 2>/dev/null
for f in $P; do
  TMO=120 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $f --dim T=7 --dim D=33 --dim V=50 --dim H=33 --dim B=3 -o /tmp/san.safetensors
done
TMO=120 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run tests/programs/layer_small.tsl --step llama_decode --dim B=3 --dim T=2 --dim S=24 -o /tmp/san.safetensors
cd $OUT && tar czf logs.tgz logs && rm -rf logs
