#!/bin/bash
# Folded into call_s16a.sh (session 2026-12-05c) and queued again (session 2026-12-05d): s16a had no time left for these parts.
# Session 2026-12-04e, device call D (issue 28; not run: no device was lent in that session): IEEE fp32 flush dots in
# one stage against the default 3xTF32 for the dual nvfp4 specs with an 8-bit SR checkpoint (nvfp4/fp8+sr,
# nvfp4/int8+sr). Offline (sass/dual_flush_dots.csv) IEEE dots cut gdn's and kda's flush pass-1 loop by 35-40% (their
# row-scaled checkpoint is not TF32-exact, so 3xTF32 takes three products and splits, and spills 600-780 bytes);
# the one A/B on the GPU (12-01, sweeps_2026-11-30f) timed IEEE only with 3 stages. Knobs only, no code change:
# (1) the flush and aligned step at B = 256; (2) the staggered step at B = 64 (goal 1b's miss: the pass-1 items,
# whose kernel spills 1.3-1.4 KB with 3xTF32 on nvfp4/fp8+sr and 84-212 B with IEEE dots: sass/dual_items_dots.csv).
# Run: run(command="BUDGET_S=560 bash reports/bench/speed/call_s11d.sh", carry=["TREE.txt", ".whl"]).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s11d}
source scripts/gpu/parts.sh s11d "${BUDGET_S:-560}"
V="default;flush_dot=ieee,flush_stages=1;flush_dot=ieee"
part dual_b256 300 python3 scripts/gpu/launch_sweep.py --out "$R/dual_dots" --families gdn,kda \
  --specs nvfp4/fp8+sr,nvfp4/int8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_dual_dots --variants "$V"
part dual_b64 200 python3 scripts/gpu/launch_sweep.py --out "$R/dual_dots" --families gdn,kda \
  --specs nvfp4/fp8+sr,nvfp4/fp16 --batch 64 --phases step,staggered --rep-ms 10 --stem b64_dual_dots \
  --variants "default;flush_dot=ieee,flush_stages=1"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
