#!/bin/bash
# Session 2026-12-04b, device call B (issue 28): the whole bench table in one run (3 families x 5 specs x
# B = 256, 1, 64, 512, aligned + staggered, the per-step split, fla and the mamba_ssm anchors, the device checks with
# the counters verified after every step) on the tree whose fused step advances its own counters.
# Resumable: a later call with the same R (its results.partial.csv carried) times only the missing rows.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s9b}
source scripts/gpu/parts.sh s9b "${BUDGET_S:-570}"
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
part bench 560 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families gdn,kda,mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
