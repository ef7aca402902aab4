#!/bin/bash
# Session 2026-12-04c, device call D (issue 28): the device-decided nvfp4 item layout now runs a one-sub-block item
# as the unrolled item (not a loop of one); checked on the GPU and timed against the fixed one-sub-block item at
# B = 32 staggered (one sub-block per item decided) and B = 64 staggered (two).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s10d}
source scripts/gpu/parts.sh s10d "${BUDGET_S:-280}"
part gpu_tests 80 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_nvfp4_items.py \
  tests/kernels/test_decode.py -k "item_layout or any_sub_blocks or nvfp4_flush_sub_block_items"
for b in 32 64; do
  part items_b$b 90 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families gdn,kda --specs nvfp4/fp16 \
    --batch $b --phases staggered --rep-ms 10 --stem b${b}_item_blocks --variants "default;flush_nvfp4_item_blocks=1"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
