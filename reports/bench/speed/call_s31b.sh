#!/bin/bash
# Session 2026-12-07f, device call s31b (issue 28, goal 3): the step inputs' loads issued before the first block
# barrier (kernels/tiles.py _load_step_inputs, kernels/fused.py), against the tree before (fbd5a81), in one call.
# Only the order of loads and casts changed, so the bits must not move (tree_compare.py's hashes of both trees). The
# batch-1 fp32 rows (fla, mamba_ssm, conventional, replay; device checks) of both trees twice, old then new in each
# round, so the ratio is read in two rounds; then the B = 256 nvfp4/fp16 rows (the non-flush launch's prologue); last,
# on this tree, batch-1 replay fp32 with the arrival's reply kept in one thread and not (s30d read it before the change).
#   mkdir -p .gpu/t_fbd5a81 && git archive fbd5a81 kernels quant replayssm_quant scripts pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_fbd5a81
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=540 bash reports/bench/speed/call_s31b.sh", carry=["TREE.txt", ".whl", ".gpu/t_fbd5a81"])
# Ran as s31b (2026-12-07f, an H100): on the cold machine each tree's bench compiled every kernel and anchor, and
# the three tree_compare parts ran out of their caps; the arrival sweep ran. The same tree_compare commands then ran
# on the warm machine under one timeout of 230-420 s each (s31c, s31d: reports/bench/speed/README.md). On a cold
# machine give each tree_compare part about 300 s.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s31b}
source scripts/gpu/parts.sh s31b "${BUDGET_S:-540}"
TC="python3 scripts/gpu/tree_compare.py --old .gpu/t_fbd5a81 --rep-ms 20"
part b1_round1 170 $TC --out "$R/b1_round1" --specs fp32 --batches 1
part b1_round2 120 $TC --out "$R/b1_round2" --specs fp32 --batches 1
part b256 150 $TC --out "$R/b256" --specs nvfp4/fp16 --batches 256 --families gdn,kda,mamba2
part b1_arrival 80 python3 scripts/gpu/launch_sweep.py --out "$R/b1_arrival" --families gdn,kda,mamba2 --specs fp32 \
  --batch 1 --phases step,nonflush --rep-ms 20 --stem b1_replay_fp32_arrival \
  --variants "default;arrive_deferred=true;arrive_deferred=false;default"
for d in b1_round1 b1_round2 b256; do echo "== $d"; cat "$R/$d/compare.md" 2>/dev/null; done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
