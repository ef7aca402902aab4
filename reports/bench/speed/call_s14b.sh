#!/bin/bash
# Session 2026-12-05b, device call s14b (issue 28). Call s13b (this session) timed this tree against 0fff0c1 at
# B = 256: gdn and kda faster on every spec, mamba2's nvfp4 read slower (non-flush 154 -> 184 us). Offline, the
# inline-PTX E2M1 decode (02c9010) lets the compiler unroll mamba2's 4-chunk pipelined loop whole: 80 -> 104
# registers, 12 -> 9 programs per SM by registers (scripts/ptxas_report.py --nonflush). This call times, in one
# run, mamba2 nvfp4/fp16 (its non-flush kernel is nvfp4+sr's too), the step and the non-flush launch alone:
#   old    = 0fff0c1 (before the changes);  new = this tree, default and with the non-flush launch capped at 80 / 96
#            registers, and unstaged (nonflush_stages=0);
#   intdec = this tree with the nvfp4 E2M1 decode as integer operations on the GPU too (no inline PTX).
# Before the call: .gpu/sr_old as for call_s13a.sh; .gpu/alt_intdec = `git archive HEAD kernels quant replayssm_quant
# scripts pyproject.toml eval/__init__.py`, then its `if HW_CASTS:` of rounding._e2m1_pairs_scaled -> `if False:`.
#   run(command="BUDGET_S=190 bash reports/bench/speed/call_s14b.sh",
#       carry=["TREE.txt", ".whl", ".gpu/sr_old", ".gpu/alt_intdec"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s14b}
source scripts/gpu/parts.sh s14b "${BUDGET_S:-190}"
AB="--families mamba2 --specs nvfp4/fp16 --batch 256 --phases step,nonflush --rep-ms 10"
part new 60 python3 scripts/gpu/launch_sweep.py --out "$R/ab" $AB --stem b256_new \
  --variants "default;nonflush_maxnreg=80;nonflush_maxnreg=96;nonflush_stages=0"
part intdec 35 bash -c "cd .gpu/alt_intdec && python3 scripts/gpu/launch_sweep.py --out '$R/ab' $AB --stem b256_intdec"
part old 35 bash -c "cd .gpu/sr_old && python3 scripts/gpu/launch_sweep.py --out '$R/ab' $AB --stem b256_old_0fff0c1"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
