#!/bin/bash
# Session 2026-12-06c, device call s19a (issue 28). The whole bench table on the current kernels in ONE call, for
# an H200 (the goals' card; s18d + s18e timed the same table on an H100 this session). All families, the five specs,
# B = 256, 1, 64, 512, aligned and staggered, the fla and mamba_ssm anchors, the copy bandwidth and the device
# checks. gdn first, mamba2 last: a call cut by its cap returns results.partial.csv, which --resume continues.
# Its results replace bench_h200/'s (one folder per card, each holding that card's current table; git keeps the old).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=585 bash reports/bench/speed/call_s19a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
# (on whichever card comes: since 2026-12-07f the H100 table is also older than the kernels)
# With little device time left, FAMS, SPECS and BATCHES narrow it (the loops go family by family): BATCHES=256 times
# the goal rows of every family first (session 2026-12-07b).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s19a}
source scripts/gpu/parts.sh s19a "${BUDGET_S:-585}"
part bench 575 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families "${FAMS:-gdn,kda,mamba2}" \
  --specs "${SPECS:-fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr}" --batches "${BATCHES:-256,1,64,512}"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
