#!/bin/bash
# Session 2026-12-06e, device call s22a (issue 28, the batch-1 nvfp4 step). s21b timed the spread batch-1 dual flush
# (knob fused_nvfp4_spread): flush step -30% to -50% on gdn / kda, but the step slower where the flush gains less
# (mamba2, the nvfp4+sr specs), its per-step zeroing of the heads' arrival counts (torch.zeros: one more graph node
# on every step) the suspect. Now the counts live in the cache, zeroed once per batch size (the last program
# already resets its count), and the spread form is the default. (1) bits against the head program, batch 1 and 4;
# the GPU tests of the spread flush; (2) batch 1 and 4, step and flush step, head program against spread, twice
# interleaved; (3) the bench's batch-1 rows (all families and specs, anchors and device checks in the same run) on
# the new default.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s22a.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s22a}
source scripts/gpu/parts.sh s22a "${BUDGET_S:-570}"
HP="fused_nvfp4_spread=false"
part bits_b1 90 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 \
  --specs nvfp4/fp16,nvfp4/fp8+sr,nvfp4+sr --batch 1 --steps 40 --variants "$HP;default"
part bits_b4 30 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs nvfp4/fp16 --batch 4 \
  --steps 40 --variants "$HP;default"
part gpu_tests 60 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
  -k "spread or encodes_the_committed"
S="--families gdn,kda,mamba2 --specs nvfp4/fp16,nvfp4/fp8+sr,nvfp4+sr --phases step,flush --rep-ms 10"
for B in 1 4; do
  part b${B} 50 python3 scripts/gpu/launch_sweep.py --out "$R/spread" $S --batch $B --stem b${B}_spread --variants "$HP;default"
  part b${B}_again 30 python3 scripts/gpu/launch_sweep.py --out "$R/spread" $S --batch $B --stem b${B}_spread_again \
    --variants "default;$HP"
done
part bench_b1 220 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench_b1" --resume --families gdn,kda,mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 1
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
