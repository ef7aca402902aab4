#!/bin/bash
# Session 2026-12-04c, device call B (issue 28): the nvfp4 pass-1 item layouts against each other in one run at
# B = 64 staggered (the adaptive runtime loop, the default since s10a; fixed 1 sub-block per item = the code before
# this session, unrolled; fixed 2 and 4, unrolled), the new tests on the GPU, then the bench table's mamba2 rows on
# this tree (its B = 64 dual steps flush whole heads: the item layout does not reach them). Call C resumes the
# table with gdn and kda.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s10}
export TRITON_CACHE_DIR=$PWD/.gpu/triton_cache
source scripts/gpu/parts.sh s10b "${BUDGET_S:-520}"
part gpu_tests 90 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_nvfp4_items.py \
  tests/kernels/test_decode.py -k "item_layout or any_sub_blocks"
part items_b64 200 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases staggered --rep-ms 10 --stem b64_item_blocks \
  --variants "default;flush_nvfp4_item_blocks=1;flush_nvfp4_item_blocks=2;flush_nvfp4_item_blocks=4"
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
part bench_mamba2 240 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
