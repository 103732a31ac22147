#!/bin/bash
# Device run 46 (stop 39; before stop 38's ncu45.sh in the same call): shared-memory bank
# traffic of the q GEMM on the ping-pong tile, on the 128 x 256 TMA tile and in cuBLAS's kernel. Why: per 16 of K the ping-pong's two m64n128k16 read 12 KiB of operands and TMA
# writes 8 KiB into the ring, 160 bytes a tensor-core cycle against the 128 the banks give
# (so at most 80% of the tensor rate, where run 41 measured 79% for q); the 128 x 256 tile
# (m64n256k16, two consumers on one B) needs 128. The bank metrics say whether that is the limit.
# The gate GEMM's L2 hit rate and DRAM bytes on both tiles.
# Usage (device): bash docs/perf/2026-12-08-stop39/ncu46.sh   (logs under $OUT/logs)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
F1="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
M="--section MemoryWorkloadAnalysis_Chart --section MemoryWorkloadAnalysis_Tables --metrics l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum"
TMO=80 t banks ncu --clock-control none --kernel-name regex:"prefill_1$" --launch-count 1 $M $B bench $F1
TMO=80 t banks ncu --clock-control none --kernel-name regex:"prefill_1$" --launch-count 1 $M $B bench $F1 --no-wgmma-pingpong --wgmma-tma
TMO=80 t banks ncu --clock-control none --kernel-name regex:"nvjet" --launch-count 1 $M $B bench $F1
# The gate GEMM (weights 178 MB, past the L2) on both tiles: its hit rate and DRAM bytes.
TMO=80 t banks ncu --clock-control none --kernel-name regex:"prefill_10$" --launch-count 1 $M $B bench $F1
TMO=80 t banks ncu --clock-control none --kernel-name regex:"prefill_10$" --launch-count 1 $M $B bench $F1 --no-wgmma-pingpong --wgmma-tma
grep -h "^== \|bank_reads\|bank_writes\|tensor_cycles\|per_second\|hit_rate\|dram__\|Shared Memory\|rc [1-9]" $L/banks.txt > $L/summary_banks.txt 2>&1
