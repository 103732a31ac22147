#!/bin/bash
# Session 6 run E (binary 31d9f72): decode K's norm in the cache-update kernel.
T=target/release/tessel_s
L=$OUT/log; mkdir -p $L
timeout 40 $T check tests/programs/kv_cache.tsl --dim B=2 --dim N=8 --dim KV=2 --dim D=128 --dim S=40 --dim H=4 --dim R=3 --fill pos=iota:30 --profile fast > $L/kv_check.log 2>&1; echo rc=$? >> $L/kv_check.log
DEC8="--step decode --profile fast --dim B=2 --dim T=8 --dim S=1100 --fill len=iota:1000"
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 3 $T run examples/qwen3_14b/layer.tsl $DEC8 -o /tmp/o.safetensors > $L/memcheck_decode8.log 2>&1; echo rc=$? >> $L/memcheck_decode8.log
timeout 70 compute-sanitizer --tool racecheck --error-exitcode 3 $T run examples/qwen3_14b/layer.tsl $DEC8 -o /tmp/o.safetensors > $L/racecheck_decode8.log 2>&1; echo rc=$? >> $L/racecheck_decode8.log
timeout 40 $T bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim B=1 --dim T=1 --dim S=4096 --fill len=iota:4000 --rounds 21 > $L/bench_decode_b1t1.log 2>&1; echo rc=$? >> $L/bench_decode_b1t1.log
CASES=decode PROFILE=fast timeout 200 scripts/gpu-layers.sh $T $L/l checks qwen3_14b > $L/layers_decode.log 2>&1; echo rc=$? >> $L/layers_decode.log
find $L -name "*.safetensors" -delete; find $L -name "*.npy" -delete
cd $OUT && tar czf logs.tgz log && rm -rf log
