#!/bin/bash
# Session 2026-12-06f, device call s23b (issue 28, goal 1b's limit on the current kernels). The per-kernel split of
# the staggered and aligned B = 64 step (then B = 16), nvfp4/fp16 of gdn and kda, under torch.profiler: how much of
# the staggered step is the pass-1 items (`_nvfp4_part_kernel`) and pass 2 (`_flush_kernel`) of the B / L flush rows,
# against the non-flush launch (s10a measured this on the H200 with the kernels of 2026-12-04: `prof_b64/`).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=230 bash reports/bench/speed/call_s23b.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s23b}
source scripts/gpu/parts.sh s23b "${BUDGET_S:-230}"
for B in 64 16; do
  part prof_b$B 150 python3 scripts/gpu/profile_step.py --out "$R/prof_b$B" --families gdn,kda --specs nvfp4/fp16 \
    --batch $B --rounds 2 --stagger --no-conventional
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
