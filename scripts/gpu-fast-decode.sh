#!/usr/bin/env bash
# The fast profile's tensor-core decode GEMM on the GPU: check (tolerance of one bf16 ulp against the
# executor's mma model), memcheck, and bench against cuBLAS and the exact-profile GEMV.
set -uo pipefail
B=target/release/tessel
for t in 1 8; do $B check examples/qwen3_14b/gate_proj.tsl --dim T=$t --profile fast 2>&1 | grep -E "out |PASS|FAIL"; done
for mkn in "1 16 8" "5 48 37" "16 64 9" "8 1024 40" "13 4096 4230"; do set -- $mkn; $B check tests/programs/matmul.tsl --dim M=$1 --dim K=$2 --dim N=$3 --profile fast 2>&1 | grep -E "out |FAIL|error"; done
compute-sanitizer --tool memcheck --error-exitcode 3 $B run examples/qwen3_14b/gate_proj.tsl --dim T=8 --profile fast -o /tmp/g.safetensors 2>&1 | grep -E "ERROR SUMMARY"
for t in 1 8 16; do $B bench examples/qwen3_14b/gate_proj.tsl --dim T=$t --profile fast --rounds 21 2>&1 | grep -E "µs|bandwidth"; done
for t in 1 8; do $B bench examples/qwen3_14b/gate_proj.tsl --dim T=$t --rounds 21 2>&1 | grep -E "µs"; done
