#!/bin/bash
# Session 2026-12-05, device call A (issue 28; not run: no device was lent in that session): fewer warps per flush
# program (knobs flush_warps, flush_programs_per_sm; no code path changes with them). At 4 warps a 16-row
# sub-block's dots have a 16 x 16 output (P = S_hp Kd^T, U = (..) T), which Triton's MMA layout spreads over the
# warps along N with two warps repeating the other two's products; at 2 or 1 warps nothing repeats. Offline
# (sass/flush_warps.csv, sass/README.md): the dual nvfp4 flush loops of gdn / kda take 15-16% (nvfp4/fp16) and
# 22-25% (nvfp4/fp8+sr) fewer instructions per program at 2 warps and 255 registers (4 programs, 8 warps per SM
# instead of 16); 1 warp: 23-36% fewer at 5 warps per SM (shared memory: 40 KB a program); fp32 at 1 warp: 18%
# fewer at 9 warps per SM. The pass-1 items of few flush rows (B = 64 staggered, goal 1b's miss) lose 34-45% of
# their loop and nearly all their spills at 2 warps. Whether the lost occupancy costs more is what this measures:
# (1) the bits: knob_identity_check against the default (stored tensors should be identical; the flush outputs'
#     row sums may differ in the last bits: their reduction order follows the layout);
# (2) the flush and the aligned step at B = 256: gdn, kda x nvfp4/fp16, nvfp4/fp8+sr;
# (3) the staggered step at B = 64 (the pass-1 items launch takes the same warps): the same specs;
# (4) gdn, mamba2 fp32 at B = 256 at 1 warp (9 programs per SM) and 2.
# Parts (2) and (3) have run since (s15b: B = 256, bits identical for the 2-warp programs, slower; s17b: B = 64) and
# are dropped here: what is left is (1) with the 1-warp programs and mamba2, and (4).
# Run: run(command="BUDGET_S=230 bash reports/bench/speed/call_s12a.sh", carry=["TREE.txt", ".whl"]).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s12a}
source scripts/gpu/parts.sh s12a "${BUDGET_S:-230}"
W2="flush_warps=2,maxnreg=255,flush_programs_per_sm=4"
W1="flush_warps=1,maxnreg=255,flush_programs_per_sm=5"
part bits 90 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs nvfp4/fp16,fp32 --batch 256 \
  --steps 20 --variants "default;$W2;$W1"
part fp32_b256 110 python3 scripts/gpu/launch_sweep.py --out "$R/flush_warps" --families gdn,mamba2 --specs fp32 \
  --batch 256 --phases step,flush --rep-ms 10 --stem b256_fp32_flush_warps \
  --variants "default;flush_warps=1,maxnreg=255,flush_programs_per_sm=9;$W2"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
