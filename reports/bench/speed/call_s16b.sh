#!/bin/bash
# Session 2026-12-05c, device call s16b (issue 28; queued after call_s16a.sh): Nsight Compute on the current
# kernels. The limits behind each missed goal (speed README, "Nsight Compute readings") were read on the kernels
# before sessions 2026-12-04d-2026-12-05b (gdn 12-02, kda / mamba2 12-04); since then the SR flush is 17% faster
# and the nvfp4 non-flush read 9-10% (s15's table). Profiled here at B = 256, each family, replay: the last
# non-flush step and the flush step (profile_step.py --ncu-window) of nvfp4/fp16 (goal 1a), fp8+sr and int8+sr
# (goal 4), with the sections and metrics of call s8c; then limits_summary.py's one-line-per-launch table.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=540 bash reports/bench/speed/call_s16b.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s16b}
source scripts/gpu/parts.sh s16b "${BUDGET_S:-540}"
source scripts/gpu/ncu.sh
NCU_ARGS=(--clock-control none --profile-from-start off -k "regex:_(non)?flush_kernel|_nvfp4_part_kernel"
          "${NCU_SECTIONS[@]}" -f)
if [ -n "$NCU" ]; then
  PS="python3 scripts/gpu/profile_step.py --out /tmp/s16b_ncu --rounds 0 --ncu-window --no-conventional --batch 256"
  part ncu_gdn_b256 120 "$NCU" "${NCU_ARGS[@]}" -o "$R/ncu_gdn_b256" $PS --families gdn --specs nvfp4/fp16,fp8+sr,int8+sr
  ncu_export ncu_gdn_b256
  part ncu_kda_b256 120 "$NCU" "${NCU_ARGS[@]}" -o "$R/ncu_kda_b256" $PS --families kda --specs nvfp4/fp16,fp8+sr,int8+sr
  ncu_export ncu_kda_b256
  part ncu_mamba2_b256 120 "$NCU" "${NCU_ARGS[@]}" -o "$R/ncu_mamba2_b256" $PS --families mamba2 \
    --specs nvfp4/fp16,fp8+sr,int8+sr
  ncu_export ncu_mamba2_b256
fi
timeout 30 python3 scripts/gpu/limits_summary.py "$R" | tail -n 40
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
