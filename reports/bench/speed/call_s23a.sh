#!/bin/bash
# Session 2026-12-06e, device call s23a (issue 28, goal 1b; queued). Grids of more than 8 programs per SM run a
# replay step as two launches (non-flush rows, then flush rows; few flush rows: the pass-1 items, then pass 2 in the
# flush launch), a rule timed before the fused grid could spread an nvfp4 flush over the head's programs (s22a: at
# batch 1 and 4 the spread flush step is 21-57% faster than one program's). In a staggered step at B = 16-64 only
# B / L rows flush: the fused grid with the spread flush would run them in one launch. Staggered and aligned steps,
# the split default against split_flush=false, the dual nvfp4/fp16 spec of every family, B = 16 and 64.
# Offline (sass/b64_fused_spread.csv: ptxas_report.py --fused --batch 64): the fused kernel is capped at 128 registers,
# 4 programs per SM (gdn spills 160 B), where the split non-flush launch runs 8: its non-flush rows may lose more.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=420 bash reports/bench/speed/call_s23a.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s23a}
source scripts/gpu/parts.sh s23a "${BUDGET_S:-420}"
V="default;split_flush=false"
for B in 64 16; do   # 64 first: the batch where goal 1b is missed
  part b${B} $(( B == 64 ? 230 : 170 )) python3 scripts/gpu/launch_sweep.py --out "$R/fused_spread" --families gdn,kda,mamba2 \
    --specs nvfp4/fp16 --batch $B --phases step,staggered --rep-ms 10 --stem b${B}_fused_spread --variants "$V"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
