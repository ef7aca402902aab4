#!/bin/bash
# Session 2026-12-04c, device call A (issue 28): the nvfp4 pass-1 items sized to one wave of the flush grid
# (kernels/nvfp4_items.py, knob flush_nvfp4_item_blocks) checked on the GPU and timed against one sub-block per
# item (the previous layout) at B = 64 staggered; the whole-head one-pass dual flush (flush_block_v = V) against
# the two-pass flush at B = 256; the missing B = 64 limits (torch.profiler of kda and gdn aligned / staggered,
# Nsight Compute of _nvfp4_part_kernel and _flush_kernel on the staggered flush step).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s10a}
export TRITON_CACHE_DIR=$PWD/.gpu/triton_cache
source scripts/gpu/parts.sh s10a "${BUDGET_S:-560}"
part gpu_tests 90 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_nvfp4_items.py \
  tests/kernels/test_decode.py -k "item_layout or nvfp4_flush_sub_block_items or any_sub_blocks"
part items_b64 150 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_item_blocks \
  --variants "default;flush_nvfp4_item_blocks=1;flush_nvfp4_item_blocks=4"
part onepass_b256 130 python3 scripts/gpu/launch_sweep.py --out "$R/onepass" --families gdn,kda,mamba2 \
  --specs nvfp4/fp16 --batch 256 --phases step,flush --rep-ms 10 --stem b256_dual_flush_rows \
  --variants "default;flush_block_v=64;flush_block_v=128;flush_block_v=128,maxnreg=0"
part prof_b64 70 python3 scripts/gpu/profile_step.py --out "$R/prof_b64" --families kda,gdn --batch 64 \
  --specs nvfp4/fp16 --stagger --no-conventional --rounds 2
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: ${NCU:-none}"
NCU_ARGS=(--clock-control none --profile-from-start off -k "regex:_nvfp4_part_kernel|_flush_kernel|_nonflush_kernel"
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum -f)
for fam in kda gdn; do
  if [ -n "$NCU" ]; then
    part ncu_${fam}_b64 60 "$NCU" "${NCU_ARGS[@]}" -o "$R/ncu_${fam}_b64" python3 scripts/gpu/profile_step.py \
      --out /tmp/s10a_ncu --families $fam --rounds 0 --ncu-window --stagger --no-conventional --batch 64 \
      --specs nvfp4/fp16
    if [ -f "$R/ncu_${fam}_b64.ncu-rep" ]; then
      timeout 40 "$NCU" -i "$R/ncu_${fam}_b64.ncu-rep" --page details > "$R/ncu_${fam}_b64_details.txt" 2>&1
      timeout 40 "$NCU" -i "$R/ncu_${fam}_b64.ncu-rep" --page raw --csv --print-units base \
        > "$R/ncu_${fam}_b64_raw.csv" 2>&1
      pack
    fi
  fi
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
