#!/bin/bash
# Session 2026-12-04, device call 3: issue 25 on the final tree (GPU tests of the chunk graphs, grouped attention
# and Triton decode; the 4B throughput and chunked-vs-step agreement at 80 rows x 256 positions; the Nemotron-H-8B
# shape at 40 rows x 128 positions) and issue 28's measurement gaps (Nsight Compute on kda and mamba2 at B = 256;
# the kda int8+sr rows at B = 512). Parts in priority order, each under its cap and the call's budget.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s8c}
PACK_EXCLUDE='*.npz'
source scripts/gpu/parts.sh s8c "${BUDGET_S:-560}"
part gpu_tests 80 python3 -m pytest -q -x -p no:cacheprovider tests/eval/test_decode_graphs.py \
  tests/eval/test_attention.py tests/kernels/test_storage_decode.py
part throughput_4b 170 python3 scripts/gpu/kl_scale.py --out "$R/throughput" --shape qwen3_5_4b \
  --parts throughput,agreement --tokens 256
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: ${NCU:-none}"
NCU_ARGS=(--clock-control none --profile-from-start off -k "regex:_(non)?flush_kernel|_decode_step_kernel"
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum -f)
for fam in kda mamba2; do
  if [ -n "$NCU" ]; then
    part ncu_${fam}_b256 60 "$NCU" "${NCU_ARGS[@]}" -o "$R/ncu_${fam}_b256" python3 scripts/gpu/profile_step.py \
      --out /tmp/s8c_ncu --families $fam --rounds 0 --ncu-window --batch 256 --specs fp32,nvfp4/fp16,fp8+sr,int8+sr
    if [ -f "$R/ncu_${fam}_b256.ncu-rep" ]; then
      timeout 40 "$NCU" -i "$R/ncu_${fam}_b256.ncu-rep" --page details > "$R/ncu_${fam}_b256_details.txt" 2>&1
      timeout 40 "$NCU" -i "$R/ncu_${fam}_b256.ncu-rep" --page raw --csv --print-units base \
        > "$R/ncu_${fam}_b256_raw.csv" 2>&1
      timeout 20 python3 scripts/gpu/limits_summary.py "$R" | tail -n 30
      pack
    fi
  fi
done
part bench_kda512 80 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench_kda512" --families kda \
  --specs int8+sr --batches 512
part nemotron_8b 200 python3 scripts/gpu/kl_scale.py --out "$R/nemotron" --shape nemotron_h_8b \
  --parts throughput,agreement --docs 4 --tokens 128
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; pack_split '*.npz'; ls -la "$OUT"
