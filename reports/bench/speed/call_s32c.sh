#!/bin/bash
# Session 2026-12-07g, device call s32c (issue 28, goal 3): Nsight Compute on gdn's batch-1 replay fp32 step in the
# default 16-row 4-warp programs and in 8-row one-warp programs (knob block_v=8,num_warps=1: fla's shape, s32b found
# it no faster), beside fla's batch-1 decode: the instructions per warp, the cycles per issue and the stalls of each,
# with the sections of call_s30b.sh, then limits_summary.py's one-line-per-launch table.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=300 bash reports/bench/speed/call_s32c.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s32c}
source scripts/gpu/parts.sh s32c "${BUDGET_S:-300}"
source scripts/gpu/ncu.sh
SECTIONS=(--clock-control none --profile-from-start off "${NCU_SECTIONS[@]}" -f)
if [ -n "$NCU" ]; then
  PS="python3 scripts/gpu/profile_step.py --out /tmp/s32c_ncu --rounds 0 --ncu-window --no-conventional --specs fp32 \
    --batch 1 --families gdn"
  part ncu_b1_default 80 "$NCU" "${SECTIONS[@]}" -k "regex:_decode_step_kernel" -o "$R/ncu_b1_default" $PS
  ncu_export ncu_b1_default
  part ncu_b1_bv8 80 "$NCU" "${SECTIONS[@]}" -k "regex:_decode_step_kernel" -o "$R/ncu_b1_bv8" $PS \
    --knobs block_v=8,num_warps=1
  ncu_export ncu_b1_bv8
  part ncu_fla_b1 60 "$NCU" "${SECTIONS[@]}" -k "regex:fused_recurrent" --launch-count 4 -o "$R/ncu_fla_b1" \
    python3 scripts/gpu/ncu_fla_anchor.py --family gdn --batch 1
  ncu_export ncu_fla_b1
fi
timeout 30 python3 scripts/gpu/limits_summary.py "$R" | tail -n 40
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
