#!/bin/bash
# Session 2026-12-04c, device call D (issue 28): the device-decided nvfp4 item layout now runs a one-sub-block item
# as the unrolled item (not a loop of one); checked on the GPU and timed against the fixed one-sub-block item at
# B = 32 staggered (one sub-block per item decided), and kda's B = 64 staggered default (two) again.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s10d}
source scripts/gpu/parts.sh s10d "${BUDGET_S:-200}"
part gpu_tests 60 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_nvfp4_items.py \
  tests/kernels/test_decode.py -k "item_layout or any_sub_blocks or nvfp4_flush_sub_block_items"
part items_b32 100 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families gdn,kda --specs nvfp4/fp16 \
  --batch 32 --phases staggered --rep-ms 10 --stem b32_item_blocks --variants "default;flush_nvfp4_item_blocks=1"
part items_b64 40 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families kda --specs nvfp4/fp16 \
  --batch 64 --phases staggered --rep-ms 10 --stem b64_item_blocks_kda --variants "default"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
