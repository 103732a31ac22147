#!/bin/bash
# Device run 28b (stop 34): the MN-major wgmma tiles' `tessel check`s at larger shapes (the
# CPU executor's share dominates: sizes kept so each ends well within its limit).
# Usage (device): bash docs/perf/2026-12-07-stop34/run28b.sh   (writes under $OUT/logs)
B=./target/release/tessel_mnb_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
P="tests/programs/matmul_mn.tsl --profile fast"
TMO=150 t check $B check $P --step xw --no-wgmma-pingpong --wgmma-tma --dim M=1030 --dim K=600 --dim N=4104
TMO=200 t check $B check $P --step linear_grads --dim M=1026 --dim K=2056 --dim N=1032
TMO=200 t check $B check $P --step xw --dim M=3000 --dim K=600 --dim N=2056
