#!/bin/bash
# Issue 18, device run 7 (one H200): ten AdamW steps of the Qwen3-14B LoRA layer, tessel's
# `train` step against PEFT + torch.optim.AdamW (tests/gpu/lora_train_compare.py), fast.
# Usage (device): bash docs/perf/2026-12-02-issue18/run7.sh   (writes under $OUT)
B=./target/release/tessel_s
mkdir -p $OUT
python3 scripts/make_checkpoint.py examples/qwen3_14b/config.json /tmp/ck --layers 0,1 --seed 1 --shards 3 > $OUT/checkpoint.log 2>&1
python3 tests/gpu/lora_train_compare.py --tessel $B --checkpoint /tmp/ck --config examples/qwen3_14b/config.json \
  --layer 1 --T 2048 --R 16 --steps 10 --profile ${PROFILE:-fast} --out /tmp/train --json $OUT/train_compare.json 2>&1 | tee $OUT/train_compare.txt
echo "rc ${PIPESTATUS[0]}" | tee -a $OUT/train_compare.txt
