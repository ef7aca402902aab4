#!/bin/bash
# Session 2026-12-06d, device call s20e (issue 28, goal 1b at B = 64: staggered / aligned 1.39-1.60 on the dual nvfp4
# specs of gdn and kda). A staggered step at B = 64 flushes 4 rows through the nvfp4 pass-1 items
# (`_nvfp4_part_kernel`), latency-bound at 4 programs of 4 warps per SM. s17b's 2-warp flush (every flush launch)
# took 14-16% off gdn's staggered step but lost at B = 256 aligned, where the whole-head flush runs; since this tree
# the items' launch can take its own warps (knob flush_items_warps; below 4 uncapped), the whole-head flush and the
# aligned step keep theirs. (1) bits: the knob against the default, B = 64 with staggered slot groups (the items
# path); (2) B = 64 aligned and staggered, gdn and kda dual nvfp4 specs: default, 2-warp items, 1-warp items.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=400 bash reports/bench/speed/call_s20e.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s20e}
source scripts/gpu/parts.sh s20e "${BUDGET_S:-400}"
part bits 80 python3 scripts/gpu/knob_identity_check.py --families gdn,kda --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 64 --steps 32 --variants "default;flush_items_warps=2"
part b64 240 python3 scripts/gpu/launch_sweep.py --out "$R/items_warps" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_items_warps \
  --variants "default;flush_items_warps=2;flush_items_warps=1"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
