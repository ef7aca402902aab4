#!/bin/bash
# Session 2026-12-05b, device call s15b (issue 28; not run: this session's device time ran out). SECOND of the next
# device session, after call_s15a.sh: the bench table's gdn and kda rows on this tree with the device checks and the
# fla anchors, resumed into the folder of s15a's mamba2 rows (carried as .gpu/res_s15b/bench/results.partial.csv),
# as call s10c did; then the int8 read without the NaN select (session 2026-12-05b) against the tree before it, int8+sr
# at B = 256 (non-flush launch and step), all families; then, if time is left, the bits and B = 256 times of the
# 2-warp dual nvfp4 flush (call_s12a.sh's first parts).
#   mkdir -p .gpu/int8_before && git archive fc1de9b kernels quant replayssm_quant scripts pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/int8_before
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s15b.sh",
#       carry=["TREE.txt", ".whl", ".gpu/res_s15b", ".gpu/int8_before"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s15b}
source scripts/gpu/parts.sh s15b "${BUDGET_S:-570}"
[ -f "$R/bench/results.partial.csv" ] || echo "!! no carried mamba2 rows: the table will lack them"
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
part bench 460 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families gdn,kda \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
I8="--families gdn,kda,mamba2 --specs int8+sr --batch 256 --phases step,nonflush --rep-ms 10"
part int8_new 40 python3 scripts/gpu/launch_sweep.py --out "$R/int8" $I8 --stem b256_new
part int8_before 40 bash -c "cd .gpu/int8_before && python3 scripts/gpu/launch_sweep.py --out '$R/int8' $I8 \
  --stem b256_before_fc1de9b"
W2="flush_warps=2,maxnreg=255,flush_programs_per_sm=4"
part knob_bits 50 python3 scripts/gpu/knob_identity_check.py --families gdn --specs nvfp4/fp16 --batch 256 \
  --steps 20 --variants "default;$W2"
part knob_b256 60 python3 scripts/gpu/launch_sweep.py --out "$R/flush_warps" --families gdn,kda \
  --specs nvfp4/fp16 --batch 256 --phases step,flush --rep-ms 10 --stem b256_dual_flush_warps --variants "default;$W2"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
