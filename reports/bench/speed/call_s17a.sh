#!/bin/bash
# Session 2026-12-06, device call s17a (issue 28): the batch-1 regression of the 8-bit SR read copies (call s16a:
# gdn fp8+sr / int8+sr non-flush +7.3% / +6.0% against 0fff0c1). Offline the batch-1 fused kernel had 9 more
# barriers and 21 more shuffles since 7fe1199 (the row-scaled read without decoding first: two scalings per step,
# each a cross-warp max of gamma and one of |gamma v|). This tree takes gamma's max once (none where gamma is the
# head's scalar) and both |gamma q| and |gamma k| maxima in one reduction (tiles._read_scales): offline gdn 8-bit
# 49 -> 43 barriers, 111 -> 104 shuffles; mamba2 30 -> 27; the split non-flush kernel 3 barriers fewer (gdn, kda).
# (1) GPU tests of the changed helpers and reads; (2) batch 1, this tree against b76c5e5 (before) and 0fff0c1
# (before the regression) in one run; (3) B = 256 non-flush step, this tree against b76c5e5.
#   for c in b76c5e5 0fff0c1; do mkdir -p .gpu/t_$c && git archive $c kernels quant replayssm_quant scripts \
#     pyproject.toml eval/__init__.py | tar -x -C .gpu/t_$c; done
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=420 bash reports/bench/speed/call_s17a.sh", carry=["TREE.txt", ".whl", ".gpu/t_b76c5e5",
#       ".gpu/t_0fff0c1"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s17a}
source scripts/gpu/parts.sh s17a "${BUDGET_S:-420}"
part gpu_tests 100 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_tiles.py \
  tests/kernels/test_decode_rowscaled.py tests/kernels/test_decode.py -k "read_reduction or bit_exact_vs_torch or tiles \
or rowscaled"
B1="--specs fp8+sr,int8+sr,nvfp4/fp16 --batch 1 --phases step,nonflush --rep-ms 10"
part b1_new 45 python3 scripts/gpu/launch_sweep.py --out "$R/b1" --families gdn,mamba2 $B1 --stem b1_new
part b1_b76c5e5 45 bash -c "cd .gpu/t_b76c5e5 && python3 scripts/gpu/launch_sweep.py --out '$R/b1' --families gdn,mamba2 $B1 \
  --stem b1_old_b76c5e5"
part b1_0fff0c1 30 bash -c "cd .gpu/t_0fff0c1 && python3 scripts/gpu/launch_sweep.py --out '$R/b1' --families gdn $B1 \
  --stem b1_old_0fff0c1"
part b1_new_again 45 python3 scripts/gpu/launch_sweep.py --out "$R/b1" --families gdn,mamba2 $B1 --stem b1_new_again
B256="--families gdn,kda --specs fp8+sr,nvfp4/fp16 --batch 256 --phases nonflush --rep-ms 10"
part b256_new 50 python3 scripts/gpu/launch_sweep.py --out "$R/b256" $B256 --stem b256_nonflush_new
part b256_b76c5e5 50 bash -c "cd .gpu/t_b76c5e5 && python3 scripts/gpu/launch_sweep.py --out '$R/b256' $B256 \
  --stem b256_nonflush_old_b76c5e5"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
