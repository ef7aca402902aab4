#!/bin/bash
# Session 2026-12-05b, device call s15a (issue 28; not run: this session's device time ran out). FIRST of the next
# device session; call_s15b.sh completes the bench table.
# (1) mamba2's nvfp4 non-flush decode. Call s13b (2026-12-05b) timed the tree d5b280a against 0fff0c1 at B = 256:
#     gdn and kda faster on every spec, mamba2's nvfp4 read slower (non-flush 154 -> 184 us). Offline, the
#     inline-PTX E2M1 decode (02c9010) lets ptxas unroll mamba2's 4-chunk pipelined loop whole (80 -> 104
#     registers, 12 -> 9 programs per SM by registers). Since then mamba2 decodes by integer operations again (knob
#     nonflush_e2m1_ptx, false by default for mamba2 only; the same bits), which compiles to the old tree's code.
#     Timed here in one run, mamba2 nvfp4/fp16 (its non-flush kernel is nvfp4+sr's too), the step and the non-flush
#     launch alone: this tree by default, with the PTX decode, the PTX decode capped at 96 registers, unstaged; then
#     0fff0c1's tree.
# (2) the decode tests of call s13a that its cap cut, on the GPU, now with seeds fixed by the case and (lossy
#     recurrence checkpoints) each step checked from the reference's state; the row-scaled tests (the int8 read
#     without the NaN select of 2026-12-05b runs on the GPU for the first time; call_s15b.sh times it) and the
#     rounding tests (the nvfp4 decode's integer path on the GPU, now mamba2's non-flush default, beside the PTX one);
# (3) the bench table's mamba2 rows on this tree with the device checks (as call s10b; call_s15b.sh: gdn, kda).
# Before the call:
#   mkdir -p .gpu/sr_old && git archive 0fff0c1 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/sr_old
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s15a.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
# Then fetch .gpu/res_s15a/bench/results.partial.csv from the call's s15a.tgz into .gpu/res_s15b/bench/ for s15b.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s15a}
source scripts/gpu/parts.sh s15a "${BUDGET_S:-560}"
AB="--families mamba2 --specs nvfp4/fp16 --batch 256 --phases step,nonflush --rep-ms 10"
part e2m1_new 70 python3 scripts/gpu/launch_sweep.py --out "$R/e2m1" $AB --stem b256_new \
  --variants "default;nonflush_e2m1_ptx=true;nonflush_e2m1_ptx=true,nonflush_maxnreg=96;nonflush_stages=0"
part e2m1_old 40 bash -c "cd .gpu/sr_old && python3 scripts/gpu/launch_sweep.py --out '$R/e2m1' $AB --stem b256_old_0fff0c1"
part gpu_tests 150 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py -k "bit_exact_vs_torch \
or corrections or scratch_l2 or other_grid or nvfp4_flush_sub_block_items"
part gpu_tests_formats 90 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_quantize_rowscaled.py \
  tests/kernels/test_decode_rowscaled.py tests/kernels/test_rounding_triton.py
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
part bench_mamba2 280 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
