#!/bin/bash
# Device run 26 (stop 33), one batch:
# - the split decode attention with every block of a range in flight (SPLIT_STAGES): tessel
#   check of the small layer over a cache long enough to split (S = 1100), exact and fast,
#   compute-sanitizer memcheck and racecheck; the Qwen3-14B decode bench at B = 1 and 8,
#   this binary (tessel_s33_s) beside stop 32's (tessel_r11_s, 2 stages);
# - the merged tensor-core GEMV at B = 8 (checked on the GPU for the first time);
# - Python: the out= fast path (python_overhead.py --check), tessel.lora's
#   grad_order="sequence" (python_lora.py), the LoRA example's curves with it, and the
#   fold step's own time at Qwen3-14B's o_proj.
# Usage (device): bash docs/perf/2026-12-07-stop33/run26.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
N=./target/release/tessel_s33_s
O=./target/release/tessel_r11_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
small="tests/programs/layer_small.tsl --step qwen3_decode"
for p in exact fast; do
  TMO=60 t check $N check $small --profile $p --dim B=2 --dim T=1 --dim S=1100
done
TMO=40 t check $N check $small --profile fast --dim B=8 --dim T=1 --dim S=96
for tool in memcheck racecheck; do
  TMO=120 t check compute-sanitizer --tool $tool --error-exitcode 3 $N run $small --profile fast --dim B=2 --dim T=1 --dim S=1100 -o /tmp/r.safetensors
done
TMO=60 t check compute-sanitizer --tool memcheck --error-exitcode 3 $N run $small --profile fast --dim B=8 --dim T=1 --dim S=96 -o /tmp/r.safetensors
for B in 1 8; do for bin in $N $O; do
  TMO=40 t bench $bin bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$B --fill len=iota:4095 --rounds 21
done; done
# What grad_order="sequence" adds to a backward: the fold step at Qwen3-14B's o_proj (5120 -> 5120, r 16).
for sl in "S=1 --dim L=2048" "S=8 --dim L=256"; do
  TMO=40 t bench $N bench python/tessel/lora.tsl --step lora_adapter_grads --profile invariant --dim $sl --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
done
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
TMO=60 t python python3 tests/gpu/python_overhead.py $OUT new --check
cd tests/gpu && TMO=200 t python python3 python_lora.py $OUT; cd ../..
TMO=200 t train python3 examples/python/lora_train.py --steps 200 --out $OUT
