#!/bin/bash
# Folded into call_s16a.sh (session 2026-12-05c), which runs its parts after the GPU tests.
# Session 2026-12-05, device call C (issue 28; not run: no device was lent in that session): two knobs of the dual
# nvfp4 flush of gdn and kda, both off by default. (a) flush_corrections_rows: a separate delta-rule spec's
# corrections computed first for the whole head in groups of 64 rows, where each 16-row sub-block's 16 x 16 dots
# repeat over the 4 warps. (b) flush_scratch_l2: L2 eviction hints on the S_L scratch (stores evict_last, the reload
# evict_first), which an ncu reading (12-02) suggests is read back from DRAM: the flush moved 2.1 GB against ~0.73 GB
# of checkpoints and ring; the hints change no bits.
# Offline (sass/flush_corrections_rows.csv, sass/README.md): 20-29% fewer flush instructions per (row, head); with an
# fp16 checkpoint the 64-row dots compile to warpgroup MMA with 66 KB of shared memory, so 3 programs per SM fit,
# not 4. Measured here:
# (1) the GPU tests of the knob (bit-exact in the interpreter; on the GPU within the fma tolerance);
# (2) outputs and stored tensors against the default (knob_identity_check: with (a) the 3xTF32 sums of other tile
#     shapes may differ in the last bits, and it prints the size of any difference; (b) must be identical);
# (3) the flush and the aligned step at B = 256: (a) with 3 programs per SM, (b).
# Run: run(command="BUDGET_S=560 bash reports/bench/speed/call_s12c.sh", carry=["TREE.txt", ".whl"]).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s12c}
source scripts/gpu/parts.sh s12c "${BUDGET_S:-560}"
C64="flush_corrections_rows=64"
part gpu_tests 80 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode.py \
  -k "whole_head_corrections or scratch_l2"
part bits 120 python3 scripts/gpu/knob_identity_check.py --families gdn,kda --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 256 --steps 20 --variants "default;$C64;flush_scratch_l2=true"
part corr_b256 330 python3 scripts/gpu/launch_sweep.py --out "$R/corrections" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_corrections_rows \
  --variants "default;$C64,flush_programs_per_sm=3;flush_scratch_l2=true"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
