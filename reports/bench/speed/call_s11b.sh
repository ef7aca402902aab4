#!/bin/bash
# Session 2026-12-04d, device call B (issue 28; not run: no device was lent in that session): the 16-random-bit
# stochastic-rounding path (commit 947b24e, rounding._encode_sr16) on the GPU, against the kernels before it
# (commit 0fff0c1) in the same run: (1) the flush and aligned steps of the SR specs at B = 256, old tree then new;
# (2) the bits of both trees' decode runs (tree_compare.py --no-bench: outputs and every stored tensor, which must be
# equal); (3) every format's bits against the torch reference (formats_check.py, SR included).
# Before the call, unpack the old tree beside this one and carry it:
#   mkdir -p .gpu/sr_old && git archive 0fff0c1 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/sr_old
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s11b.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s11b}
source scripts/gpu/parts.sh s11b "${BUDGET_S:-560}"
[ -d .gpu/sr_old/kernels ] || echo "!! .gpu/sr_old missing: the old tree's parts cannot run"
SWEEP="--families gdn,mamba2 --specs fp8+sr,int8+sr,nvfp4+sr --batch 256 --phases step,flush --rep-ms 10"
part sr_old 150 bash -c "cd .gpu/sr_old && python3 scripts/gpu/launch_sweep.py --out '$R/sr_ab' $SWEEP --stem b256_old_0fff0c1"
part sr_new 150 python3 scripts/gpu/launch_sweep.py --out "$R/sr_ab" $SWEEP --stem b256_new
# (the read of a row-scaled copy changed on 2026-12-05, bits included: the SR specs' bits are compared where the read
# copy is nvfp4 and the SR checkpoint fp8 / int8)
part sr_bits 150 python3 scripts/gpu/tree_compare.py --old .gpu/sr_old --out "$R/sr_bits" --no-bench \
  --families gdn --specs nvfp4/fp8+sr,nvfp4/int8+sr,nvfp4+sr,nvfp4/fp16 --batches 16,256
part formats 90 python3 scripts/gpu/formats_check.py --out "$R/formats" --n 1000000 --bench-elems 16777216
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
