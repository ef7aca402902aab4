#!/bin/bash
# Session 2026-12-02b, device call B (issue 27): the GPU rerun of the fast-decay verify test (fixed slot lists),
# the spec bench in one folder (B = 256 with all acceptance rates, then B = 1, 64, 512 at rate 1; --resume keeps
# the B = 256 rows), Nsight Compute on the gdn verify kernels (fp32, nvfp4/fp16; the limit behind the 1.2x goal).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s6b}
source scripts/gpu/parts.sh s6b "${BUDGET_S:-540}"
part gpu_tests 70 python3 -m pytest -n 8 -q --tb=short -rf tests/kernels/test_verify_fast_decay.py
part spec_b256 175 python3 scripts/gpu/spec_bench.py --out "$R/sb" --resume --batches 256 --rep-ms 20 --budget-s 150
part spec_rest 200 python3 scripts/gpu/spec_bench.py --out "$R/sb" --resume --batches 256,1,64,512 --rates 1 \
  --rep-ms 20 --budget-s 200
part bench_kda512 60 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench_kda512" --families kda --specs int8+sr \
  --batches 512
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [ -n "$NCU" ]; then
  part ncu_verify 60 "$NCU" --clock-control none -k "regex:verify_kernel" -c 6 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -f -o "$R/ncu_verify" python3 scripts/gpu/spec_bench.py --out /tmp/s6b_sw --sweep-verify --families gdn \
    --specs fp32,nvfp4/fp16 --sweep-block-v 128 --sweep-split 1 --sweep-warps 4 --sweep-dots tf32x3 --rep-ms 5
  [ -f "$R/ncu_verify.ncu-rep" ] && timeout 40 "$NCU" -i "$R/ncu_verify.ncu-rep" --page details \
    > "$R/ncu_verify_details.txt" 2>&1
  grep -E '^  [_a-z]|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occ|No Eligible|Stall|Warp Cycles Per Issued|Executed Ipc|dram__bytes' \
    "$R/ncu_verify_details.txt" 2>/dev/null | head -n 90
fi
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
