#!/bin/bash
# Session 2026-12-05, device call C (issue 28; not run: no device was lent in that session): the dual nvfp4 flush
# of a separate delta-rule spec (gdn, kda) with the head's corrections computed first in groups of 64 rows (knob
# flush_corrections_rows; off by default), where each 16-row sub-block's 16 x 16 dots repeat over the 4 warps.
# Offline (sass/flush_corrections_rows.csv, sass/README.md): 20-29% fewer flush instructions per (row, head); with an
# fp16 checkpoint the 64-row dots compile to warpgroup MMA with 66 KB of shared memory, so 3 programs per SM fit,
# not 4. Measured here:
# (1) the GPU tests of the knob (bit-exact in the interpreter; on the GPU within the fma tolerance);
# (2) outputs and stored tensors against the default (knob_identity_check: the 3xTF32 sums of other tile shapes may
#     differ in the last bits; it prints the size of any difference);
# (3) the flush and the aligned step at B = 256, the default grid and 3 programs per SM.
# Run: run(command="BUDGET_S=560 bash reports/bench/speed/call_s12c.sh", carry=["TREE.txt", ".whl"]).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s12c}
source scripts/gpu/parts.sh s12c "${BUDGET_S:-560}"
C64="flush_corrections_rows=64"
part gpu_tests 80 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode.py -k "whole_head_corrections"
part bits 100 python3 scripts/gpu/knob_identity_check.py --families gdn,kda --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 256 --steps 20 --variants "default;$C64"
part corr_b256 330 python3 scripts/gpu/launch_sweep.py --out "$R/corrections" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_corrections_rows \
  --variants "default;$C64;$C64,flush_programs_per_sm=3"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
