#!/bin/bash
# Session 2026-12-06d, device call s21a (issue 28, goal 1b; queued). Since d4c4a81 gdn nvfp4/fp16's pass-1 items run in
# 2-warp programs (s20e / s20f: staggered -6% to -11% at B = 16, 32, 64); kda nvfp4/fp16 and gdn nvfp4/fp8+sr lost 3%
# at B = 64 and keep 4 warps; mamba2's dual specs and kda nvfp4/fp8+sr were not timed (s20e's cap). (1) B = 16 and 64
# staggered (and aligned at 64), mamba2 dual specs and kda nvfp4/fp8+sr: 4 against 2 warps; (2) gdn nvfp4/fp16 at
# B = 64 again with the new default against 4 warps (the default's first timing inside a table-like run).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=420 bash reports/bench/speed/call_s21a.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s21a}
source scripts/gpu/parts.sh s21a "${BUDGET_S:-420}"
V="flush_items_warps=4;flush_items_warps=2"
part b64 200 python3 scripts/gpu/launch_sweep.py --out "$R/items_warps" --families mamba2,kda,gdn \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_items_warps_s21a \
  --variants "$V"
part b16 120 python3 scripts/gpu/launch_sweep.py --out "$R/items_warps" --families mamba2,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 16 --phases staggered --rep-ms 10 --stem b16_items_warps_s21a --variants "$V"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
