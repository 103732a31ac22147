#!/bin/bash
# Device run 39c (stop 36): transformers / SDPA beside tessel on the card of run 39b, run as
# two device-tool commands right after it (not through run39.sh c, which runs the three cases
# in one command):
mkdir -p $OUT/logs
timeout 330 python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases attn,prefill --rounds 20 > $OUT/logs/torch.txt 2>&1; echo rc $? >> $OUT/logs/torch.txt
timeout 230 python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases decode --rounds 20 > $OUT/logs/torch_decode.txt 2>&1; echo rc $? >> $OUT/logs/torch_decode.txt
