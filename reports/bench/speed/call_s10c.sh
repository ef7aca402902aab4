#!/bin/bash
# Session 2026-12-04c, device call C (issue 28): the bench table's gdn and kda rows on this tree, resumed into the
# folder of call B's mamba2 rows (carried as .gpu/res_s10c/bench/results.partial.csv), then the kda nvfp4 pass-1
# item layouts against each other at B = 64 staggered (call B's sweep timed out before kda).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s10c}
source scripts/gpu/parts.sh s10c "${BUDGET_S:-590}"
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
part bench 470 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families gdn,kda \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
part items_kda 200 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases staggered --rep-ms 10 --stem b64_item_blocks_kda \
  --variants "default;flush_nvfp4_item_blocks=1;flush_nvfp4_item_blocks=2"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
