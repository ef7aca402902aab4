#!/bin/bash
# Session 2026-12-06, device call s17c (issue 28): goal 1b at B = 64 (staggered within 10% of aligned), the two
# knobs that each cut the dual nvfp4 specs' staggered step on the H100 in this session, in one run with the aligned
# step: 2-warp flush programs (s17b: gdn staggered -14% / -16%, kda +5% / -8%) and IEEE one-stage flush dots (s11d:
# staggered -20% on the 8-bit SR checkpoints, aligned +6-7%), alone and together; gdn (where both won).
#   run(command="BUDGET_S=270 bash reports/bench/speed/call_s17c.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh >/dev/null
R=${R:-$PWD/.gpu/res_s17c}
source scripts/gpu/parts.sh s17c "${BUDGET_S:-270}"
W2="flush_warps=2,maxnreg=255,flush_programs_per_sm=4"
part b64_gdn 260 python3 scripts/gpu/launch_sweep.py --out "$R/b64" --families gdn --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 64 --phases step,staggered --rep-ms 10 --stem b64_gdn_w2_ieee \
  --variants "default;$W2;$W2,flush_dot=ieee,flush_stages=1"
cat "$R/parts.tsv"; pack
