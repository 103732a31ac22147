#!/bin/bash
# Device run 40c (stop 36): the Qwen3-32B prefill layer, heaviest-first dealing (tessel_h_s)
# against 0469925 (tessel_w_s), on the warm machine of run 40b (NVIDIA H100 80GB HBM3,
# driver 580.159.04, its card.txt), one device-tool command:
mkdir -p $OUT/logs
for b in h w; do timeout 40 ./target/release/tessel_${b}_s bench examples/qwen3_32b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 5 > $OUT/logs/prefill32_$b.txt 2>&1; done
