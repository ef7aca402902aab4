#!/bin/bash
# Session 2026-12-05b, device call s14a (issue 28). Call s13a (this session) failed two GPU tests before its time
# ran out: test_triton_bit_exact_vs_torch[gdn-nvfp4+sr-conventional-None-fused] and [...-default-fused] (the
# conventional step, whose nvfp4 state re-enters the recurrence at every step), and its bits part did not reach
# the old tree. This call reads why:
# (1) every conventional case of that test on this tree, with the assertions' values;
# (2) the nvfp4 ones again with the kernels compiled without fma contraction (TRITON_DEFAULT_FP_FUSION=0): if
#     they pass, the miss is a flipped rounding decision, not a wrong bit in the kernels;
# (3) the bits of the replay decode runs with an nvfp4 read copy against the kernels of 0fff0c1 (must be equal);
# (4) the same conventional cases on the tree of 0fff0c1 (its own tests), to tell a regression from a tolerance.
# Before the call:
#   mkdir -p .gpu/sr_old && git archive 0fff0c1 kernels quant replayssm_quant scripts tests pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/sr_old
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=540 bash reports/bench/speed/call_s14a.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s14a}
source scripts/gpu/parts.sh s14a "${BUDGET_S:-540}"
T="tests/kernels/test_decode.py"
part conv_new 100 python3 -m pytest -q -rA --tb=short -p no:cacheprovider $T -k "bit_exact_vs_torch and conventional"
part conv_nofma 80 env TRITON_DEFAULT_FP_FUSION=0 TRITON_CACHE_DIR=/tmp/triton_nofma python3 -m pytest -q -rA \
  --tb=short -p no:cacheprovider $T -k "bit_exact_vs_torch and conventional and nvfp4"
part bits 230 python3 scripts/gpu/tree_compare.py --old .gpu/sr_old --out "$R/bits" --no-bench \
  --families gdn,mamba2,kda --specs nvfp4/fp16,nvfp4+sr,nvfp4/fp8+sr --batches 1,256
# last: the old tree's setup.sh rebuilds /tmp/rq_site on the old tree
part conv_old 100 bash -c "cd .gpu/sr_old && unset RQ_SETUP_DONE && source scripts/gpu/setup.sh && python3 -m pytest \
  -q -rA --tb=short -p no:cacheprovider $T -k 'bit_exact_vs_torch and conventional'"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
