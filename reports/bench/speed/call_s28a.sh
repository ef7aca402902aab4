#!/bin/bash
# Session 2026-12-07d, device call s28a (issue 28). On an H200: call_s19a.sh, the whole bench table (the goals'
# card). On any other card: the flush launch's register cap. Nsight Compute (s16b of 2026-12-07d, H100) counts
# 8.2 M local-memory spill requests in gdn's dual nvfp4 flush at B = 256, whose kernel spills 416 bytes per thread
# at the 128-register cap (offline, `scripts/ptxas_report.py --flush --knobs maxnreg=128;maxnreg=168;maxnreg=255`:
# 260 bytes at 168, none at 255; kda 260 / 108 / 0, mamba2 144 / 24 / 0; the 8-bit SR flushes 0-64 / 0 / 0). Fewer
# programs per SM with more registers each were not timed at 4 warps. First the bits (knob_identity_check: the same
# outputs and stored tensors under every cap), then the same-call A/B at B = 256 (launch_sweep, the variants timed in
# turn): the cap 128 at 4 programs per SM (the default), 168 at 3, 255 at 2.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=400 bash reports/bench/speed/call_s28a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
fi
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s28a}
source scripts/gpu/parts.sh s28a "${BUDGET_S:-400}"
CAPS="default;maxnreg=168,flush_programs_per_sm=3;maxnreg=255,flush_programs_per_sm=2"
part cap_bits 80 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 --specs nvfp4/fp16,fp8+sr \
  --batch 256 --steps 20 --variants "$CAPS"
part cap_b256 240 python3 scripts/gpu/launch_sweep.py --out "$R/flush_cap" --families gdn,kda,mamba2 \
  --specs "${CAP_SPECS:-nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr}" --batch 256 --phases step,flush --rep-ms 10 \
  --stem b256_flush_cap --variants "$CAPS"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
