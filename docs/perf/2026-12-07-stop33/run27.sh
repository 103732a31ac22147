#!/bin/bash
# Device run 27 (stop 33), one batch at main after the merge of `mnb`:
# - docs/perf/2026-12-07-issue19/mnb.sh: the wgmma tiles with an MN-major B (dx = dy · W)
#   checked, sanitized and benched (binary tessel_mnb_s);
# - tessel.lora with the faster fold (a thread per row in the scan, dA's part transposed):
#   tests/gpu/python_lora.py (now timing grad_order="sequence" too), the LoRA example's
#   curves, and the fold step's own time at Qwen3-14B's o_proj;
# - merge-launches' rider: the small decode layer checked, the 14B decode layer at B = 1.
# Usage (device): bash docs/perf/2026-12-07-stop33/run27.sh   (writes under $OUT), then, as a
# second call on the warm machine, bash docs/perf/2026-12-07-issue19/mnb.sh
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
N=./target/release/tessel_mnb_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
# The rider (decode's RoPE table launched with the q/k/v GEMVs): the small layer checked, the
# Qwen3-14B decode layer at B = 1 beside stop 32's binary.
for p in exact fast; do
  TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=1 --dim T=1 --dim S=1100
done
for bin in $N ./target/release/tessel_r11_s; do
  TMO=40 t bench $bin bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=1 --fill len=iota:4095 --rounds 21
done
for sl in "S=1 --dim L=2048" "S=8 --dim L=256"; do
  TMO=40 t bench $N bench python/tessel/lora.tsl --step lora_adapter_grads --profile invariant --dim $sl --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
done
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
cd tests/gpu && TMO=200 t python python3 python_lora.py $OUT; cd ../..
TMO=150 t train python3 examples/python/lora_train.py --steps 200 --out $OUT
