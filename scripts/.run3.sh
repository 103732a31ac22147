set -u
BIN=target/release/tessel
O=$OUT
bash scripts/gpu-attention.sh $BIN $O/a bench 2>&1 | grep -E "_0|_1|merge|ranges|default|flash |cudnn|passed|FAIL" | head -30
A=tests/programs/attention_bench.tsl
timeout 120 ncu --kernel-name regex:prefill_0 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section Occupancy $BIN run $A --step prefill --profile fast --dim T=2048 -o /tmp/p.safetensors > $O/ncu_prefill.txt 2>&1; grep -E "Duration|Throughput|Warp Cycles|Issued|Occupancy|Stall|Executed Ipc|Registers" $O/ncu_prefill.txt | head -30
timeout 150 bash scripts/gpu-attention.sh $BIN $O/c checks 2>&1 | tail -3
timeout 150 bash scripts/gpu-fuzz.sh $BIN $O/f 300 2>&1 | tail -8
