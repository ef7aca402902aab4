#!/bin/bash
# Session 2026-12-06e, device call s22d (issue 28, goals 1a, 2 and 4 with the bf16 ring; queued for an H200). s22c
# timed these rows on an H100, where the bandwidth-bound anchors are slowed more than our rows: the same B = 256 goal
# rows with bf16 rings (exact for the bench's bf16 activations), their anchors (fla, mamba_ssm, conventional fp32,
# copy bandwidth) and the device checks in one run on the goals' card.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=300 bash reports/bench/speed/call_s22d.sh", carry=["TREE.txt", ".whl"], needs_h200=true)
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s22d}
source scripts/gpu/parts.sh s22d "${BUDGET_S:-300}"
part bench 290 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench_b256_bf16_ring" --resume \
  --families gdn,kda,mamba2 --specs fp32,nvfp4/fp16,fp8+sr,int8+sr --batches 256 --ring-dtype bfloat16
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
