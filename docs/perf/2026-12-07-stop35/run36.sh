#!/bin/bash
# Device run 36 (stop 35): correctness of what stop 35 changed, on the GPU.
#   1. `tessel check` now runs each step twice — checked, then as one CUDA graph with its
#      programmatic launches overlapping — and requires the same bits
#      ("one CUDA graph == checked run bit for bit"): the small decode layer (exact: GPU ==
#      executor; fast at B = 8, split attention), the small prefill layer, the attention
#      programs (mma.sync tile and the FA3-form wgmma tile);
#   2. the driver's GPU tests (external memory; a decode layer as a graph); `run` (now one
#      CUDA graph) against `run --checked`, byte for byte;
#   3. GPU fuzzing, which now counts a graph/checked difference as a defect;
#   4. compute-sanitizer on the attention kernels, whose K/V copies of whole blocks now
#      take one address per thread (memcheck, racecheck).
# Binaries: docs/perf/2026-12-07-stop35/build.sh. Usage (device):
#   bash docs/perf/2026-12-07-stop35/run36.sh   (writes under $OUT/logs)
N=./target/release/tessel_n_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
LS=tests/programs/layer_small.tsl
TMO=40 t check $N check $LS --step qwen3_decode --profile exact --dim B=1 --dim T=1 --dim S=300
TMO=40 t check $N check $LS --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100
TMO=60 t check $N check $LS --step qwen3 --profile fast --dim T=130 --fill pos=iota:0
TMO=60 t check $N check $LS --step qwen3 --profile fast --dim T=130 --fill pos=iota:0 --wgmma-attention
A="tests/programs/attention.tsl --profile fast"
t check $N check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
t check $N check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128 --wgmma-attention
t check $N check $A --step decode --dim B=1 --dim N=70 --dim H=4 --dim KV=1 --dim S=256 --dim D=64
t check $N check $A --step full_f16 --dim H=3 --dim T=33 --dim S=129 --dim D=64
TMO=60 t driver ./target/release/gpu_driver_s --ignored --test-threads=1
# `run` now runs the step as one CUDA graph; --checked one kernel at a time: same file.
R="$LS --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100"
TMO=40 t run $N run $R -o /tmp/r36_graph.safetensors
TMO=40 t run $N run $R --checked -o /tmp/r36_checked.safetensors
cmp /tmp/r36_graph.safetensors /tmp/r36_checked.safetensors >> $L/run.txt 2>&1; echo "cmp rc $?" >> $L/run.txt
TMO=70 t fuzz $N fuzz --count 200 --seed 940000 --profile exact
TMO=70 t fuzz $N fuzz --count 200 --seed 941000 --profile all
TMO=70 t fuzz $N fuzz --count 100 --seed 942000 --profile all --attention
S() { local tool=$1; shift; TMO=120 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $N run "$@" -o /tmp/s36_$tool.safetensors; }
S memcheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S racecheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S memcheck $LS --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100
grep -h "PASS\|FAIL\|rc \|ERROR SUMMARY\|defect\|graph" $L/*.txt > $L/summary.txt 2>&1
