#!/bin/bash
# Issue 17, device run 3 (one H200), what run 2 did not reach in its 600 s (its `check` at
# T=64, D=1000 ran the CPU references past the limit): the fuzzer on the GPU with the new
# ops in its generator, `tessel check` of the ops' programs in the fast profile at small
# shapes (dims K and R given this time), and compute-sanitizer memcheck on them.
# Usage (device): bash docs/perf/2026-12-02-issue17/run3.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
P="tests/programs/elementwise_ops.tsl tests/programs/gather.tsl tests/programs/select_scan.tsl"
D="--dim T=7 --dim D=33 --dim V=50 --dim H=33 --dim B=3 --dim K=40 --dim R=5"
TMO=150 t fuzz $B fuzz --count 200 --seed 17000 --profile all
TMO=60 t check $B check $P --profile fast $D
for f in $P; do
  TMO=60 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $f $D -o /tmp/san.safetensors
done
cd $OUT && tar czf logs.tgz logs && rm -rf logs
