#!/bin/bash
# Session 2026-12-07h, device call s33b (issue 28, goal 1b): Nsight Compute on the current kernels of the B = 64
# nvfp4/fp16 step, gdn and kda, staggered (the pass-1 items of the 4 flush rows per step, pass 2, the non-flush
# launch) and aligned (the last non-flush step and the whole flush), with shared keys. Goal 1b's limit rested on
# s10a's readings of older kernels (2026-12-04, H200); the sections are call_s30b.sh's, then limits_summary.py. First
# the GPU tests of the fused step's flush paths (the flush terms now built only by the programs that flush rows).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=400 bash reports/bench/speed/call_s33b.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s33b}
source scripts/gpu/parts.sh s33b "${BUDGET_S:-400}"
source scripts/gpu/ncu.sh
part gpu_tests 100 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
  -k "groups or replay-8 or spread"
SECTIONS=(--clock-control none --profile-from-start off "${NCU_SECTIONS[@]}" -f)
if [ -n "$NCU" ]; then
  PS="python3 scripts/gpu/profile_step.py --out /tmp/s33b_ncu --rounds 0 --ncu-window --no-conventional \
    --specs nvfp4/fp16 --batch 64 --families gdn,kda"
  part ncu_b64_staggered 150 "$NCU" "${SECTIONS[@]}" -k "regex:_nvfp4_part_kernel|_(non)?flush_kernel" \
    -o "$R/ncu_b64_staggered" $PS --stagger
  ncu_export ncu_b64_staggered
  part ncu_b64_aligned 120 "$NCU" "${SECTIONS[@]}" -k "regex:_nvfp4_part_kernel|_(non)?flush_kernel" \
    -o "$R/ncu_b64_aligned" $PS
  ncu_export ncu_b64_aligned
fi
timeout 30 python3 scripts/gpu/limits_summary.py "$R" | tail -n 40
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
