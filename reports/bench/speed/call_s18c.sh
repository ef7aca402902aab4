#!/bin/bash
# Session 2026-12-06b, device call s18c (issue 28; queued: s18b's parts that its caps and the session's device time
# cut). (1) Goal 3: the bench's batch-1 fp32 rows (fla, mamba_ssm, conventional, replay; device checks) on this tree
# and on 6065e45 (the tree before the fused step's advance left the programs' tails) one after the other: on a cold
# machine each bench compiles every kernel first (s18b: > 70 s), so each part gets 150 s. (2) The pass-1 items'
# default IEEE dots for the row-scaled 8-bit SR checkpoints (1086a80) at B = 64, aligned and staggered, beside
# flush_items_dot=tf32x3 (the old default): nvfp4/int8+sr was not timed in s17c.
#   mkdir -p .gpu/t_6065e45 && git archive 6065e45 kernels quant replayssm_quant scripts pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_6065e45
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s18c.sh", carry=["TREE.txt", ".whl", ".gpu/t_6065e45"])
# (.whl: fla 0.6.0, fla-core, einops wheels and mamba_ssm-2.3.2.post1.tar.gz, the mamba2 anchor's source.)
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s18c}
source scripts/gpu/parts.sh s18c "${BUDGET_S:-560}"
BB="--families gdn,kda,mamba2 --specs fp32 --batches 1 --rep-ms 20"
part bench_b1_new 150 python3 scripts/gpu/bench.py --out "$R/bench_b1_new" $BB
part bench_b1_old 150 bash -c "cd .gpu/t_6065e45 && python3 scripts/gpu/bench.py --out '$R/bench_b1_old_6065e45' $BB"
part b64_items 200 python3 scripts/gpu/launch_sweep.py --out "$R/items_dot" --families gdn,kda \
  --specs nvfp4/fp8+sr,nvfp4/int8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_items_default \
  --variants "default;flush_items_dot=tf32x3"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
