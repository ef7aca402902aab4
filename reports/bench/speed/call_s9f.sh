#!/bin/bash
# Session 2026-12-04b, device call F (issue 28): the counter advance inside the fused step against the second
# launch, same run, both ways per row (knob step_advance): batch 1 replay and conventional fp32, and the
# conventional fp32 grids at B = 64 and 256 where the s9b table showed the in-step advance slower.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s9f}
source scripts/gpu/parts.sh s9f "${BUDGET_S:-200}"
part b1_replay 50 python3 scripts/gpu/launch_sweep.py --out "$R/advance" --families gdn,kda,mamba2 --specs fp32 \
  --batch 1 --phases step --rep-ms 20 --stem b1_replay --variants "default;step_advance=false"
part b1_conv 40 python3 scripts/gpu/launch_sweep.py --out "$R/advance" --families gdn,kda,mamba2 --specs fp32 \
  --mode conventional --batch 1 --phases step --rep-ms 20 --stem b1_conventional --variants "default;step_advance=false"
for b in 64 256; do
  part conv_b$b 40 python3 scripts/gpu/launch_sweep.py --out "$R/advance" --families gdn,kda,mamba2 --specs fp32 \
    --mode conventional --batch $b --phases step --rep-ms 10 --stem b${b}_conventional --variants "default;step_advance=true"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
