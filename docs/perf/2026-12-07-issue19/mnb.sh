#!/bin/bash
# Device run of branch `mnb`: the wgmma tiles with an MN-major B (`x @ w`, w stored [K, N],
# the backward's dx = dy · W), bf16/f16 in `fast` on sm_90a.
#   1. tessel check (GPU against the executor and the oracle) of tests/programs/matmul_mn.tsl
#      in `fast` (shapes chosen so that 132 SMs take the wgmma tiles): the ping-pong tile at
#      M, N, K off the tiles (K = 136: a zero-filled K tail; N = 4104: a last panel 8
#      columns wide), its ring wrapping over many tiles, the K-major twin (xwt), the f16
#      epilogue, widened operands, a linear layer's gradients (dx on the ping-pong tile);
#      the `wgmma: 1` tile (N = 4101, odd: element copies into the panels; N = 1032: the
#      128 × 128 tile) and the `wgmma: tma` tile (128 × 256: four B panels); `explain`;
#   2. compute-sanitizer memcheck and racecheck on one ping-pong run with an MN-major B;
#   3. tessel bench (beside cuBLAS on the same layouts) of the T = 2048, K = N = 5120 bf16
#      GEMM with w stored [K, N] (MN-major B: mma.sync 331–337 µs before this branch on an
#      H100) and with w stored [N, K] (K-major B, the forward's), both on the ping-pong tile.
# Usage (device, from the repository root, with the stripped binary of this branch at
# ./target/release/tessel_mnb_s): bash docs/perf/2026-12-07-issue19/mnb.sh   (writes under
# $OUT/logs)
B=./target/release/tessel_mnb_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
P="tests/programs/matmul_mn.tsl --profile fast"
t explain $B explain $P --step xw --dim M=2048 --dim K=5120 --dim N=5120
t explain $B explain $P --step xw --dim M=1030 --dim K=136 --dim N=4104
t check $B check $P --step xw --dim M=1030 --dim K=136 --dim N=4104
TMO=300 t check $B check $P --step xw --dim M=3000 --dim K=600 --dim N=2056
TMO=300 t check $B check $P --step xw --dim M=4100 --dim K=1000 --dim N=4200
t check $B check $P --step xwt --dim M=1030 --dim K=136 --dim N=4104
t check $B check $P --step xw_epilogue --dim M=1030 --dim K=136 --dim N=4104
t check $B check $P --step xw_widened --dim M=1030 --dim K=200 --dim N=4104
TMO=300 t check $B check $P --step linear_grads --dim M=2050 --dim K=4104 --dim N=1032
t check $B check $P --step xw --no-wgmma-pingpong --dim M=1030 --dim K=136 --dim N=4101
t check $B check $P --step xw --no-wgmma-pingpong --dim M=2048 --dim K=600 --dim N=1032
t check $B check $P --step xw --no-wgmma-pingpong --wgmma-tma --dim M=1030 --dim K=600 --dim N=4104
TMO=60 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $P --step xw --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/mnb_m.safetensors
TMO=90 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $P --step xw --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/mnb_r.safetensors
G="--profile fast --dim M=2048 --dim K=5120 --dim N=5120"
t bench $B bench $P --step xw $G
t bench $B bench $P --step xwt $G
t bench $B bench $P --step xw $G --no-wgmma-pingpong
# The Qwen3-14B LoRA layer's gradients: its 7 bf16 backward GEMMs (dx = dy · W) now on the
# ping-pong tile.
TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step grads --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
