#!/bin/bash
# Session 2026-12-06, device call s17b (issue 28), run inline on the warm H100 after calls s17a, s16b, s11d and s11a
# (the same command as here, one line): the GPU tests of the nvfp4 flush items that s11a's 60 s cap cut, and the
# 2-warp flush programs at B = 64 staggered (call_s12a.sh's dual_b64 part; its B = 256 part lost in s15b).
#   run(command="BUDGET_S=330 bash reports/bench/speed/call_s17b.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh >/dev/null
R=${R:-$PWD/.gpu/res_s17b}
source scripts/gpu/parts.sh s17b "${BUDGET_S:-330}"
part gpu_tests_items 110 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_nvfp4_items.py \
  tests/kernels/test_decode.py -k "item_layout or any_sub_blocks or nvfp4_flush_sub_block_items"
W2="flush_warps=2,maxnreg=255,flush_programs_per_sm=4"
part dual_b64_w2 200 python3 scripts/gpu/launch_sweep.py --out "$R/flush_warps" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases staggered --rep-ms 10 --stem b64_dual_flush_warps \
  --variants "default;$W2"
cat "$R/parts.tsv"; pack
