#!/bin/bash
# Session 2026-12-04e, device call C (issue 28; not run: no device was lent in that session): the two decode changes
# of that session against the kernels before them (commit 8665907) in one run: the nvfp4 decode through the E4M3
# image of the codes (rounding._e2m1_pairs_scaled: inline PTX and the hardware e4m3x2 -> f16x2 cvt on the GPU;
# sass/nvfp4_decode.md) and int8 codes to floats without the conversion instruction (rowscaled._int8_values):
# (Since 2026-12-05 the nvfp4 block scales also take the E4M3 hardware casts: the same tests and bits cover it.)
# (1) its GPU tests: every code byte bit for bit against the torch reference, the nvfp4 quantizers and decodes, the
#     decode steps' nvfp4 and int8 tests (the interpreter cannot run inline PTX: this is the first run of that path);
# (2) the bits of both trees' decode runs (tree_compare.py --no-bench; the products are those of the old scaling, so
#     the hashes must be equal);
# (3) the non-flush launch and the aligned step of nvfp4/fp16, nvfp4/fp8+sr and int8+sr at B = 256 (gdn, mamba2),
#     old tree then new (run after 2026-12-05, int8+sr's new tree also has that session's row-scaled read:
#     call_s12b.sh times that change alone).
# Before the call, unpack the old tree beside this one and carry it:
#   mkdir -p .gpu/dec_old && git archive 8665907 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/dec_old
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s11c.sh", carry=["TREE.txt", ".whl", ".gpu/dec_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s11c}
source scripts/gpu/parts.sh s11c "${BUDGET_S:-560}"
[ -d .gpu/dec_old/kernels ] || echo "!! .gpu/dec_old missing: the old tree's parts cannot run"
part gpu_tests 110 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_rounding_triton.py \
  tests/kernels/test_quantize_triton.py tests/kernels/test_storage_decode.py tests/kernels/test_decode.py \
  tests/kernels/test_quantize_rowscaled.py -k "nvfp4 or int8"
SWEEP="--families gdn,mamba2 --specs nvfp4/fp16,nvfp4/fp8+sr,int8+sr --batch 256 --phases step,nonflush --rep-ms 10"
part dec_old 150 bash -c "cd .gpu/dec_old && python3 scripts/gpu/launch_sweep.py --out '$R/dec_ab' $SWEEP --stem b256_old_8665907"
part dec_new 150 python3 scripts/gpu/launch_sweep.py --out "$R/dec_ab" $SWEEP --stem b256_new
# (int8's decode is checked in an int8 checkpoint's flush: the read of a row-scaled copy changed on 2026-12-05, bits
# included, call_s12b.sh)
part dec_bits 120 python3 scripts/gpu/tree_compare.py --old .gpu/dec_old --out "$R/dec_bits" --no-bench \
  --families gdn,mamba2,kda --specs nvfp4/fp16,nvfp4+sr,nvfp4/int8+sr --batches 1,16,256
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
