#!/bin/bash
# Session 2026-12-05, device call s13a (issue 28; ran in session 2026-12-05b: results in ab_0fff0c1/s13a_*). FIRST of the next
# device session: the GPU checks of every kernel change since the last device run (2026-12-04c), before any timing.
# The changes: stochastic rounding with 16 random bits (2026-12-04d, same bits); the nvfp4 decode through the E4M3
# image of its codes (inline PTX, never executed yet) and int8 codes without the conversion instruction (2026-12-04e,
# same bits); the nvfp4 block scales through the E4M3 hardware casts (2026-12-05, same bits); the row-scaled read
# without decoding first (2026-12-05, new bits in the reference too); four flush knobs (2026-12-05, off by default).
# (1) their GPU tests against the torch reference (on the GPU within the fma tolerance; the nvfp4 code bytes exact;
#     the knobs' own bit checks are in call_s12a.sh and call_s12c.sh);
# (2) every format's bits against the torch reference, SR included (formats_check.py);
# (3) the bits of this tree's decode runs against the kernels of 0fff0c1 (before all of them) for the specs with an
#     nvfp4 read copy, which none of the changes may move: the hashes must be equal (tree_compare.py --no-bench).
# Replaces the checks of call_s11b.sh, call_s11c.sh and call_s12b.sh; call_s13b.sh times the same changes.
# Before the call, unpack the old tree beside this one and carry it:
#   mkdir -p .gpu/sr_old && git archive 0fff0c1 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/sr_old
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s13a.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s13a}
source scripts/gpu/parts.sh s13a "${BUDGET_S:-560}"
[ -d .gpu/sr_old/kernels ] || echo "!! .gpu/sr_old missing: the bits part cannot run"
part tests_formats 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_rounding_triton.py \
  tests/kernels/test_quantize_triton.py tests/kernels/test_quantize_rowscaled.py tests/kernels/test_decode_rowscaled.py
part tests_decode 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_decode.py -k "read_reduction or \
corrections or scratch_l2 or other_grid or nvfp4_flush_sub_block_items or (bit_exact_vs_torch and nvfp4)"
part formats 90 python3 scripts/gpu/formats_check.py --out "$R/formats" --n 1000000 --bench-elems 16777216
part bits 150 python3 scripts/gpu/tree_compare.py --old .gpu/sr_old --out "$R/bits" --no-bench \
  --families gdn,mamba2,kda --specs nvfp4/fp16,nvfp4+sr,nvfp4/fp8+sr,nvfp4/int8+sr --batches 1,16,256
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
