#!/bin/bash
# Session 2026-12-05b, device call s14b (issue 28). Call s13b (this session) timed the tree d5b280a against
# 0fff0c1 at B = 256: gdn and kda faster on every spec, mamba2's nvfp4 read slower (non-flush 154 -> 184 us).
# Offline, the inline-PTX E2M1 decode (02c9010) lets ptxas unroll mamba2's 4-chunk pipelined loop whole: 80 -> 104
# registers, 12 -> 9 programs per SM by registers (scripts/ptxas_report.py --nonflush). Since then mamba2's non-flush
# launch decodes by integer operations again (knob nonflush_e2m1_ptx, the plan's default for mamba2; the same bits);
# its compiled code is the old tree's (80 registers, the loop). This call times, in one run, mamba2 nvfp4/fp16 (its
# non-flush kernel is nvfp4+sr's too), the step and the non-flush launch alone:
#   new = this tree: default (integer decode), the PTX decode, the PTX decode capped at 96 registers, unstaged;
#   old = 0fff0c1 (before the five changes of 2026-12-04d..12-05).
# Before the call: .gpu/sr_old as for call_s13a.sh.
#   run(command="BUDGET_S=150 bash reports/bench/speed/call_s14b.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s14b}
source scripts/gpu/parts.sh s14b "${BUDGET_S:-150}"
AB="--families mamba2 --specs nvfp4/fp16 --batch 256 --phases step,nonflush --rep-ms 10"
part new 70 python3 scripts/gpu/launch_sweep.py --out "$R/ab" $AB --stem b256_new \
  --variants "default;nonflush_e2m1_ptx=true;nonflush_e2m1_ptx=true,nonflush_maxnreg=96;nonflush_stages=0"
part old 40 bash -c "cd .gpu/sr_old && python3 scripts/gpu/launch_sweep.py --out '$R/ab' $AB --stem b256_old_0fff0c1"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
