#!/bin/bash
# Session 2026-12-06d, device call s20a (issue 28, goals 1a / 2 / 4: the dual nvfp4 flush). The whole-head two-pass
# nvfp4 flush keeps S_L in fp32 scratch between its passes: by size ~1.07 GB of the gdn nvfp4/fp16 flush step's 2.1 GB
# of DRAM traffic at B = 256 (64 KB written and read back per (row, head)). Knob `flush_head_scratch=false` (new):
# pass 2 rebuilds S_L from the checkpoint (32 KB fp16, 16 KB fp8) and the corrections pass 1 saved (8 KB) instead:
# ~40% fewer bytes, a longer pass 2. The only timing of a recompute (`flush_scratch=false`, 2026-11-30) predates
# four sessions of flush changes. (1) bits: the knob against the default, B = 256 (whole-head items), 20 graphed steps;
# (2) B = 256 flush and aligned step, all families, both dual nvfp4 specs: default, recompute, recompute with the
# head's corrections first (64 rows), recompute on 5 programs per SM; (3) B = 64 aligned and staggered (gdn, kda).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s20a.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s20a}
source scripts/gpu/parts.sh s20a "${BUDGET_S:-560}"
NS="flush_head_scratch=false"
part bits 70 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 256 --steps 20 --variants "default;$NS;$NS,flush_corrections_rows=64"
part b256 240 python3 scripts/gpu/launch_sweep.py --out "$R/head_scratch" --families gdn,kda,mamba2 \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_head_scratch \
  --variants "default;$NS;$NS,flush_corrections_rows=64;$NS,flush_programs_per_sm=5"
part b64 120 python3 scripts/gpu/launch_sweep.py --out "$R/head_scratch" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_head_scratch \
  --variants "default;$NS"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
