#!/bin/bash
# Device run 28 (for the next session): what run 27's second call did not reach — the
# MN-major wgmma tiles' sanitizers and benchmarks first, then the large checks (300 s each:
# the CPU executor's share), with the binary of this commit stripped to tessel_mnb_s.
# Usage (device): bash docs/perf/2026-12-07-stop33/run28.sh   (writes under $OUT/logs)
B=./target/release/tessel_mnb_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
P="tests/programs/matmul_mn.tsl --profile fast"
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $P --step xw --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/m.safetensors
TMO=120 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $P --step xw --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/r.safetensors
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $P --step xw --no-wgmma-pingpong --dim M=1030 --dim K=136 --dim N=4101 -o /tmp/m2.safetensors
G="--profile fast --dim M=2048 --dim K=5120 --dim N=5120"
t bench $B bench $P --step xw $G
t bench $B bench $P --step xwt $G
t bench $B bench $P --step xw $G --no-wgmma-pingpong
TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step grads --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
t check $B check $P --step xw --no-wgmma-pingpong --wgmma-tma --dim M=1030 --dim K=600 --dim N=4104
TMO=300 t check $B check $P --step linear_grads --dim M=2050 --dim K=4104 --dim N=1032
TMO=300 t check $B check $P --step xw --dim M=3000 --dim K=600 --dim N=2056
