#!/bin/bash
# Session 2026-12-07d, device call s29c (issue 28; not run: this session's device time ran out). The split step's
# launch order (knob `flush_first`, session 2026-12-07d). At B = 64
# staggered the profile (s28b, `prof_b64/`) sums to the step: non-flush 24.7 us, then the pass-1 nvfp4 items 35.8,
# then pass 2 9.3 (gdn nvfp4/fp16), so the side stream overlaps nothing. With the flush enqueued first, its
# latency-bound items start on empty SMs and the non-flush launch fills the SMs they leave (and may overlap pass 2).
# (A high-priority side stream, `flush_stream=2`, lost in 2026-12-01d and was removed: docs/TUNING.md.) First the
# bits (knob_identity_check, B = 64, staggered rows), then the same-call A/B at B = 64 (goal 1b's rows) and B = 256.
# Ran in session 2026-12-07e (H100, tree 0a78bfd): the knob lost and was removed, so this script now fails at its
# knob check; it stays as the record of what ran (ab_s29/b{64,256}_flush_order.*).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=420 bash reports/bench/speed/call_s29c.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s29c}
source scripts/gpu/parts.sh s29c "${BUDGET_S:-420}"
ORD="default;flush_first=true"
part order_bits 90 python3 scripts/gpu/knob_identity_check.py --families gdn,kda --specs nvfp4/fp16,fp8+sr \
  --batch 64 --steps 20 --variants "$ORD"
part order_b64 140 python3 scripts/gpu/launch_sweep.py --out "$R/order" --families gdn,kda,mamba2 \
  --specs nvfp4/fp16,nvfp4/fp8+sr,fp8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_flush_order \
  --variants "$ORD"
part order_b256 140 python3 scripts/gpu/launch_sweep.py --out "$R/order" --families gdn,kda,mamba2 \
  --specs nvfp4/fp16,fp8+sr --batch 256 --phases step,staggered --rep-ms 10 --stem b256_flush_order \
  --variants "$ORD"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
