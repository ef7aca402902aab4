#!/bin/bash
# Session 2026-12-06d, device call s20b (issue 28). s20a found that on the GPU a two-pass nvfp4 flush that rebuilds S_L
# in pass 2 (knob flush_head_scratch=false, removed) gives other bits than one that keeps pass 1's S_L in scratch,
# on every family, mamba2 included (no corrections): the compiler contracts products into fmas as it places them.
# The fused grid's head program (batch 1 and other small grids) rebuilt S_L that way until 1fe21c4, so its read
# copy could be encoded with a scale that is not the amax of the values it encodes. (1) The definition test
# (test_nvfp4_read_copy_encodes_the_committed_state: the read copy = nvfp4_quantize of the committed fp32
# checkpoint after every flush) on the tree before (4a49345, .gpu/t_4a49345) and on this one, with the GPU's other
# nvfp4 decode tests; (2) bits: fused against split at batch 1 on this tree; (3) the batch-1 and batch-4 steps of
# the nvfp4 specs, this tree against 4a49345, twice interleaved.
#   mkdir -p .gpu/t_4a49345 && git archive 4a49345 kernels quant replayssm_quant scripts tests pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_4a49345
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=420 bash reports/bench/speed/call_s20b.sh", carry=["TREE.txt", ".gpu/t_4a49345"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s20b}
source scripts/gpu/parts.sh s20b "${BUDGET_S:-420}"
OLD=.gpu/t_4a49345
T="tests/kernels/test_decode.py -k encodes_the_committed"
part def_old 60 bash -c "cd $OLD && python3 -m pytest -q -rf -p no:cacheprovider $T"
part def_new 90 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py -k "nvfp4 or committed"
part bits_b1 45 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 1 --steps 40 --variants "default;split_flush=true"
S="--families gdn,kda,mamba2 --specs nvfp4/fp16,nvfp4/fp8+sr,nvfp4+sr --phases step,flush --rep-ms 10"
for B in 1 4; do
  part b${B}_new 40 python3 scripts/gpu/launch_sweep.py --out "$R/fused" $S --batch $B --stem b${B}_new
  part b${B}_old 40 bash -c "cd $OLD && python3 scripts/gpu/launch_sweep.py --out '$R/fused' $S --batch $B --stem b${B}_old_4a49345"
  part b${B}_new_again 25 python3 scripts/gpu/launch_sweep.py --out "$R/fused" $S --batch $B --stem b${B}_new_again
  part b${B}_old_again 25 bash -c "cd $OLD && python3 scripts/gpu/launch_sweep.py --out '$R/fused' $S --batch $B --stem b${B}_old_4a49345_again"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
