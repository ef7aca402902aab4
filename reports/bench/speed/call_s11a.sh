#!/bin/bash
# Session 2026-12-04d, device call A (issue 28; not run: no device was lent in that session): (1) the GPU tests of the nvfp4 pass-1 items, the one-sub-block
# branch decided on the device (commit b51dbb8) included, and its timing against the fixed one-sub-block item at
# B = 32 staggered; (2) the split flush's 3xTF32 dots on the 8-bit SR specs
# (fp8+sr, int8+sr; IEEE today) at B = 256, timed and checked against the float64 oracle; (3) torch.profiler of
# mamba2 nvfp4/fp16 at B = 512, aligned and staggered (the 1.109 staggered ratio had no profile). Run: run(command="BUDGET_S=560 bash
# reports/bench/speed/call_s11a.sh", carry=["TREE.txt", ".whl"]).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s11a}
source scripts/gpu/parts.sh s11a "${BUDGET_S:-560}"
part gpu_tests 60 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_nvfp4_items.py \
  tests/kernels/test_decode.py -k "item_layout or any_sub_blocks or nvfp4_flush_sub_block_items"
part dot8_check 60 python3 scripts/gpu/flush_dot_check.py --out "$R/dot8" --families gdn,kda,mamba2 \
  --specs fp8+sr,int8+sr
part dot8_b256 260 python3 scripts/gpu/launch_sweep.py --out "$R/dot8" --families gdn,mamba2,kda \
  --specs fp8+sr,int8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_flush_dot_8bit \
  --variants "default;flush_dot=tf32x3;flush_dot=tf32x3,flush_block_v=32"
part items_b32 90 python3 scripts/gpu/launch_sweep.py --out "$R/items" --families gdn,kda --specs nvfp4/fp16 \
  --batch 32 --phases staggered --rep-ms 10 --stem b32_item_blocks --variants "default;flush_nvfp4_item_blocks=1"
part prof_m2_b512 60 python3 scripts/gpu/profile_step.py --out "$R/prof_m2_b512" --families mamba2 --batch 512 \
  --specs nvfp4/fp16 --stagger --no-conventional --rounds 2
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
