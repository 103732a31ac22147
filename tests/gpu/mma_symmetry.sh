#!/usr/bin/env bash
# Compares q·kᵀ with (k·qᵀ)ᵀ bit for bit (tests/gpu/mma_symmetry.tsl) on the GPU, or on the
# CPU executor with --cpu, in the fast profile (tensor cores), at a few shapes and seeds.
# Usage: tests/gpu/mma_symmetry.sh TESSEL_BINARY [--cpu]
set -u
B=$1; shift
CPU=${1:-}
dir=$(mktemp -d)
bad=0; n=0
for shape in "64 128" "256 128" "128 64" "1024 128"; do
  set -- $shape
  for seed in 0 1 2; do
    $B run tests/gpu/mma_symmetry.tsl --step scores --dim N=$1 --dim D=$2 --profile fast --seed $seed $CPU -o $dir/a.safetensors > /dev/null || { echo "run failed"; exit 2; }
    $B run tests/gpu/mma_symmetry.tsl --step scores_swapped --dim N=$1 --dim D=$2 --profile fast --seed $seed $CPU -o $dir/b.safetensors > /dev/null || { echo "run failed"; exit 2; }
    n=$((n+1))
    if cmp -s $dir/a.safetensors $dir/b.safetensors; then
      echo "N=$1 D=$2 seed $seed: q·kᵀ == (k·qᵀ)ᵀ bit for bit"
    else
      echo "N=$1 D=$2 seed $seed: DIFFERENT"; bad=$((bad+1))
    fi
  done
done
rm -rf $dir
echo "$n comparisons, $bad different"
[ $bad = 0 ]
