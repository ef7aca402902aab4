#!/bin/bash
# Session 2026-12-04b, device call G (issue 28): the 8-bit conventional rows at B = 256 and 512 with the counter
# advance in a second launch (the current rule for these grids) against the in-step advance that the s9b table
# timed, same run, both ways per row (knob step_advance).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s9g}
source scripts/gpu/parts.sh s9g "${BUDGET_S:-120}"
for b in 256 512; do
  part conv8_b$b 50 python3 scripts/gpu/launch_sweep.py --out "$R/advance" --families gdn,kda,mamba2 \
    --specs fp8+sr,int8+sr --mode conventional --batch $b --phases step --rep-ms 10 --stem b${b}_conventional_8bit \
    --variants "default;step_advance=true"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
