#!/bin/bash
# Session 2026-12-06e, device call s22c (issue 28, goals 1a, 2 and 4 with the bf16 ring). s22b: at B = 256 the bf16
# ring (exact for the bench's bf16 activations) takes 2-14% off every replay row timed (gdn nvfp4/fp16 160.5 -> 151.5
# us, fp8+sr 123.7 -> 118.9). The B = 256 goal rows with bf16 rings, their anchors (fla, mamba_ssm, conventional
# fp32, copy bandwidth) and the device checks in the same run: fp32, nvfp4/fp16, fp8+sr, int8+sr, every family.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=300 bash reports/bench/speed/call_s22c.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s22c}
source scripts/gpu/parts.sh s22c "${BUDGET_S:-300}"
part bench 290 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench_b256_bf16_ring" --resume \
  --families gdn,kda,mamba2 --specs fp32,nvfp4/fp16,fp8+sr,int8+sr --batches 256 --ring-dtype bfloat16
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
