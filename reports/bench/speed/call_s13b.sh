#!/bin/bash
# Session 2026-12-05, device call s13b (issue 28; ran in session 2026-12-05b: results in ab_0fff0c1/b256_*). SECOND of the next
# device session, after call_s13a.sh has passed: the kernels of 0fff0c1 (before the five changes; calls s10a-s10c timed
# them, except the one-sub-block pass-1 item of b51dbb8, B <= 32 staggered only) against
# this tree's in one run, at B = 256, old tree then new, the aligned step and its non-flush and flush launches:
# nvfp4/fp16 (goal 1a: the E2M1 decode, the block-scale casts), nvfp4+sr (those and the SR path), fp8+sr and int8+sr
# (goal 4: the SR path, the int8 decode, the row-scaled read). The offline counts of each change are in sass/README.md;
# this times their sum. Replaces the timing parts of call_s11b.sh, call_s11c.sh and call_s12b.sh.
# Before the call (as for call_s13a.sh):
#   mkdir -p .gpu/sr_old && git archive 0fff0c1 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/sr_old
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s13b.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s13b}
source scripts/gpu/parts.sh s13b "${BUDGET_S:-560}"
[ -d .gpu/sr_old/kernels ] || echo "!! .gpu/sr_old missing: the old tree's part cannot run"
SWEEP="--families gdn,mamba2,kda --specs nvfp4/fp16,nvfp4+sr,fp8+sr,int8+sr --batch 256 --phases step,nonflush,flush --rep-ms 10"
part old 260 bash -c "cd .gpu/sr_old && python3 scripts/gpu/launch_sweep.py --out '$R/ab' $SWEEP --stem b256_old_0fff0c1"
part new 260 python3 scripts/gpu/launch_sweep.py --out "$R/ab" $SWEEP --stem b256_new
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
