#!/bin/bash
# Device run 2 of issue 19's second session: the wgmma GEMM tile on the GPU.
#   B  = target/release/tessel_s       (this tree: wgmma tile for large 16-bit GEMMs in `fast`)
#   B0 = target/release/tessel_base_s  (4b710e1, the session's start: mma.sync only)
#   G  = target/release/gpu_mma_s      (stripped `cargo test -p tessel --test gpu_mma --no-run`)
#   1. gpu_mma: every tensor-core kernel incl. the testkit wgmma GEMM, GPU against the executor;
#   2. tessel check (B, fast) at shapes where the wgmma tile applies (>= 132 tiles of 128x256),
#      with tails in M, N and K, fused epilogues and the QK-norm + RoPE row epilogue; then
#      run 18's checks (exact/fast) and GPU fuzz on B;
#   3. compute-sanitizer memcheck and racecheck on a wgmma GEMM;
#   4. bench (B0 then B): the Qwen3-14B projections at T = 4096 and the prefill layer at
#      T = 2048, fast, with cuBLAS beside each GEMM;
#   5. the Qwen3-14B prefill layer against transformers (fast, B).
# Usage (device): bash docs/perf/2026-12-06-issue19/run2.sh   (writes under $OUT)
B=./target/release/tessel_s
B0=./target/release/tessel_base_s
G=./target/release/gpu_mma_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-200} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=150 t gpu_mma $G --ignored --nocapture --test-threads=1
M="--profile fast"
t wgcheck $B check tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=264 --dim N=4100
t wgcheck $B check tests/programs/matmul.tsl --step linear_epilogue $M --dim M=1100 --dim K=136 --dim N=4352
t wgcheck $B check tests/programs/row_epilogue.tsl --step norm_rope $M --dim T=2100 --dim K=64 --dim N=4096 --dim H=32 --dim D=128 --fill pos=iota:0
t wgcheck $B explain tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=264 --dim N=4100
TMO=120 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=264 --dim N=4100 -o /tmp/m.safetensors
TMO=240 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run tests/programs/matmul.tsl --step linear $M --dim M=1030 --dim K=72 --dim N=4100 -o /tmp/r.safetensors
for bin in $B0 $B; do
  t bench $bin bench examples/qwen3_14b/projections.tsl $M --dim T=4096 --rounds 11
  t bench $bin bench examples/qwen3_14b/layer.tsl --step prefill $M --dim T=2048 --fill pos=iota:0
done
CASES=prefill TESSEL_ARGS="--profile fast" timeout 150 bash tests/gpu/run_hf_checks.sh $B $OUT/hf qwen3_14b > $L/hf.txt 2>&1; echo "rc $?" >> $L/hf.txt
cp $OUT/hf/summary.txt $L/hf_summary.txt 2>/dev/null
rm -rf $OUT/hf
B=$B bash docs/perf/2026-12-06-issue18/run18.sh
