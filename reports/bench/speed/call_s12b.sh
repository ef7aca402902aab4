#!/bin/bash
# Session 2026-12-05, device call B (issue 28; not run: no device was lent in that session): the non-flush read of a
# row-scaled fp8 / int8 copy without decoding it first (ring._read_rowdot, RSR: the codes' values times the scaled
# input, each row's sum times its scale d once), against the kernels before it (commit 94374c3) in one run.
# Offline (sass/README.md, sass/rowscaled_read_nonflush_{before,after}.csv): 8.4% / 6.4% fewer instructions per
# non-flush program on gdn fp8+sr / int8+sr, 5.5% / 4.5% on mamba2, ~2% on kda. The bits change by design (the
# products use the exact values q d), so the check is the GPU tests against the torch reference and the float64 sum:
# (1) the GPU tests of the row-scaled decode paths and of the read reduction at input scales 1, 1e6, 1e-12;
# (2) the non-flush launch and the aligned step of fp8+sr, int8+sr at B = 256 (gdn, kda, mamba2), old tree then new.
# Before the call, unpack the old tree beside this one and carry it:
#   mkdir -p .gpu/rs_old && git archive 94374c3 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/rs_old
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s12b.sh", carry=["TREE.txt", ".whl", ".gpu/rs_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s12b}
source scripts/gpu/parts.sh s12b "${BUDGET_S:-560}"
[ -d .gpu/rs_old/kernels ] || echo "!! .gpu/rs_old missing: the old tree's parts cannot run"
part gpu_tests 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode_rowscaled.py \
  tests/kernels/test_decode.py -k "rowscaled"
SWEEP="--families gdn,kda,mamba2 --specs fp8+sr,int8+sr --batch 256 --phases step,nonflush --rep-ms 10"
part rs_old 170 bash -c "cd .gpu/rs_old && python3 scripts/gpu/launch_sweep.py --out '$R/rs_ab' $SWEEP --stem b256_old_94374c3"
part rs_new 170 python3 scripts/gpu/launch_sweep.py --out "$R/rs_ab" $SWEEP --stem b256_new
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
