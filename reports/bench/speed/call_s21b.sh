#!/bin/bash
# Session 2026-12-06d, device call s21b (issue 28, the batch-1 nvfp4 step; queued). At batch 1 the dual nvfp4 specs
# step at 0.52-0.88x conventional fp32 (bench_h100/, s20c): one program per head runs the whole two-pass flush (gdn
# nvfp4/fp16 flush step 70 us) while the head's other V-block programs idle. Knob fused_nvfp4_spread (this session,
# not timed): every V-block program builds S_L of its rows into the head's scratch and its amax, the last to arrive
# (an acquire-release count per head, zeroed per step by a memset) encodes the head. (1) bits against the default,
# batch 1 and 4, the nvfp4 specs of every family; the GPU tests of the spread flush; (2) batch 1 and 4, step and
# flush step, default against spread, twice interleaved.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=400 bash reports/bench/speed/call_s21b.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s21b}
source scripts/gpu/parts.sh s21b "${BUDGET_S:-400}"
SP="default;fused_nvfp4_spread=true"
part bits_b1 60 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 \
  --specs nvfp4/fp16,nvfp4/fp8+sr,nvfp4+sr --batch 1 --steps 40 --variants "$SP"
part bits_b4 40 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs nvfp4/fp16 --batch 4 \
  --steps 40 --variants "$SP"
part gpu_tests 60 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
  -k "spread or encodes_the_committed"
S="--families gdn,kda,mamba2 --specs nvfp4/fp16,nvfp4/fp8+sr,nvfp4+sr --phases step,flush --rep-ms 10"
for B in 1 4; do
  part b${B} 60 python3 scripts/gpu/launch_sweep.py --out "$R/spread" $S --batch $B --stem b${B}_spread --variants "$SP"
  part b${B}_again 40 python3 scripts/gpu/launch_sweep.py --out "$R/spread" $S --batch $B --stem b${B}_spread_again \
    --variants "fused_nvfp4_spread=true;default"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
