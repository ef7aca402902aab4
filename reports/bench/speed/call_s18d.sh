#!/bin/bash
# Session 2026-12-06b, device call s18d (issue 28; queued). FIRST of two calls that re-time the whole bench table
# on the current kernels (s15's table is of tree de22e01; since then: the scaled reads' fewer reductions, the
# fused step's advance off the programs' tails, the pass-1 items' IEEE dots for the 8-bit SR checkpoints). Best on
# an H200, the card of s15's table; on an H100 its times are not compared with s15's, only its same-run ratios (fla,
# mamba_ssm, the copy bandwidth, conventional fp32). This call: the mamba2 rows (with the mamba_ssm anchor from
# .whl/mamba_ssm-2.3.2.post1.tar.gz) and the device checks; call_s18e.sh resumes the same folder with gdn and kda.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=400 bash reports/bench/speed/call_s18d.sh", carry=["TREE.txt", ".whl"])
# Then copy the call's bench/ folder from s18d.tgz (results.csv and correctness.csv when it finished,
# results.partial.csv when cut) to .gpu/res_s18e/bench/ for call_s18e.sh.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s18d}
source scripts/gpu/parts.sh s18d "${BUDGET_S:-400}"
part bench_mamba2 380 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
