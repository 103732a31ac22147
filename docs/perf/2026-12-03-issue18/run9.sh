#!/usr/bin/env bash
# Issue 18 run 9: tp-check of the LoRA training steps on the one H200 (ranks in turn).
# Run on the device with the stripped binary carried: carry ["target/release/tessel_s"].
set -u
T=target/release/tessel_s
for p in exact invariant fast; do
  echo "== tp-check $p"
  $T tp-check tests/programs/lora_layer_tp.tsl --dim T=33 --dim R=4 --sizes 1,2,4 --profile $p
  echo "rc $?"
done > "$OUT/tpcheck.txt" 2>&1
