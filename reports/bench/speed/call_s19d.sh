#!/bin/bash
# Session 2026-12-06c, device call s19d (issue 28; queued). Since 2da3bb2 / this tree a conventional fused step that
# advances its counters keeps each program's arrival reply in one thread until its end (`arrive_deferred`, s19c:
# batch-1 conventional fp32 -5% to -9%, H100). (1) Whether that also makes the in-launch advance pay on larger
# conventional grids, where `step_advance` lost (B = 256: +0.5% / +1.5% in s18a, with the reply at the atomic):
# B = 64 and 256, conventional fp32 and fp8+sr, the default (second launch) against step_advance=true with the reply
# at the atomic and deferred. (2) Goal 3's bench rows at batch 1 with the faster conventional kernel (kda's best
# conventional kernel is ours: its replay / conventional ratio moves) and the fla / mamba_ssm anchors.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=400 bash reports/bench/speed/call_s19d.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s19d}
source scripts/gpu/parts.sh s19d "${BUDGET_S:-400}"
V="default;step_advance=true,arrive_deferred=false;step_advance=true,arrive_deferred=true"
for B in 256 64; do
  part conv_b$B 90 python3 scripts/gpu/launch_sweep.py --out "$R/conv" --families gdn,kda,mamba2 --specs fp32,fp8+sr \
    --batch $B --mode conventional --phases step --rep-ms 10 --stem conv_b${B}_arrive --variants "$V"
done
part bench_b1 170 python3 scripts/gpu/bench.py --out "$R/bench_b1" --families gdn,kda,mamba2 --specs fp32 --batches 1 \
  --rep-ms 20
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
