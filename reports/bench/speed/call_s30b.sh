#!/bin/bash
# Session 2026-12-07e, device call s30b (issue 28): Nsight Compute on the current fp32 kernels, for the limits of
# goals 2 and 3. Their readings in the speed README are older than the kernels (goal 3's ncu is of 12-02, before the
# in-step advance; goal 2's flush of s10c, before the shared keys). Profiled: the last non-flush step and the flush
# step (profile_step.py --ncu-window, shared keys) of replay fp32 at B = 1 (every family: the fused
# `_decode_step_kernel`) and at B = 256 (gdn, mamba2: the split step's launches), and fla's gdn decode at B = 1
# (the anchor goal 3 is measured against; four launches after a warm-up), with the sections of call_s16b.sh;
# then limits_summary.py's one-line-per-launch table.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=300 bash reports/bench/speed/call_s30b.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s30b}
source scripts/gpu/parts.sh s30b "${BUDGET_S:-300}"
source scripts/gpu/ncu.sh
SECTIONS=(--clock-control none --profile-from-start off "${NCU_SECTIONS[@]}" -f)
if [ -n "$NCU" ]; then
  PS="python3 scripts/gpu/profile_step.py --out /tmp/s30b_ncu --rounds 0 --ncu-window --no-conventional --specs fp32"
  part ncu_fp32_b1 100 "$NCU" "${SECTIONS[@]}" -k "regex:_decode_step_kernel" -o "$R/ncu_fp32_b1" $PS \
    --batch 1 --families gdn,kda,mamba2
  ncu_export ncu_fp32_b1
  part ncu_fla_b1 60 "$NCU" "${SECTIONS[@]}" -k "regex:fused_recurrent" --launch-count 4 -o "$R/ncu_fla_b1" \
    python3 scripts/gpu/ncu_fla_anchor.py --family gdn --batch 1
  ncu_export ncu_fla_b1
  part ncu_fp32_b256 120 "$NCU" "${SECTIONS[@]}" -k "regex:_(non)?flush_kernel|_advance_kernel" \
    -o "$R/ncu_fp32_b256" $PS --batch 256 --families gdn,mamba2
  ncu_export ncu_fp32_b256
fi
timeout 30 python3 scripts/gpu/limits_summary.py "$R" | tail -n 40
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
