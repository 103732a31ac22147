#!/bin/bash
# Device run 29 (stop 34): programmatic dependent launch (griddepcontrol.wait before each
# kernel's first global access, launch_dependents after its last read; launches with
# programmatic stream serialization). The runtime's own GPU test, the small decode layer
# checked (GPU == executor bit for bit in `exact`) and under memcheck, then the Qwen3-14B
# decode layer at B = 1 and 8 and the prefill layer, each beside --no-dependent-launch
# (same binary, same card).
# Usage (device): bash docs/perf/2026-12-07-stop34/run29.sh   (writes under $OUT/logs)
N=./target/release/tessel_pdl_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=60 t gputest ./target/release/gpu_cuda_s --ignored --test-threads=1
for p in exact fast; do
  TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=1 --dim T=1 --dim S=1100
  TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=8 --dim T=1 --dim S=300
done
TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=300
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=300 -o /tmp/m.safetensors
for b in 1 8; do for d in "" --no-dependent-launch; do
  TMO=40 t decode $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21 $d
done; done
for d in "" --no-dependent-launch; do
  TMO=90 t prefill $N bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --rounds 11 $d
done
