#!/bin/bash
# Device run 9 of issue 19 (third session): the narrowed small math kernels (d98e6b9) and
# the attention-backward parameter fix (983c5bc, "lower: the fused attention backward's
# kernels take the bases of their matmuls' views"), against run 7's binary.
#   R7 = target/release/tessel_r7_s   run 7's binary
#   B  = target/release/tessel_s      d98e6b9
#   1. tessel check (B) of the decode layers and RoPE where the narrowed kernels run, and
#      of the regression program fuzz_5204_panic (exact: GPU == executor);
#   2. bench the Qwen3-14B decode layer, B = 1 and 8, and prefill T = 2048 (R7, B).
# Usage (device): bash docs/perf/2026-12-06-issue19/run9.sh   (writes under $OUT)
B=./target/release/tessel_s
R7=./target/release/tessel_r7_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
t check $B check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=3 --dim T=2 --dim S=96
t check $B check tests/programs/layer_small.tsl --step qwen3_decode --profile exact --dim B=3 --dim T=2 --dim S=96
t check $B check examples/qwen3_14b/rope.tsl --step rope_qk --profile exact --dim T=37
t check $B check tests/programs/regressions/fuzz_5204_panic.tsl --profile exact --dim D0=1 --dim D2=1 --dim D3=1 --dim D4=1 --dim D5=16
t check $B check tests/programs/regressions/fuzz_5204_panic.tsl --profile fast --dim D0=1 --dim D2=1 --dim D3=1 --dim D4=1 --dim D5=16
D="examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --rounds 21"
for bin in $R7 $B; do
  t decode $bin bench $D --dim B=1 --fill len=iota:4095
  t decode $bin bench $D --dim B=8 --fill len=iota:4088
done
t prefill $B bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
