#!/bin/bash
# Session 2026-12-06b, device call s18b (issue 28), after s18a and s17c on the same H100:
# (1) GPU tests: the counters' advance, the stale ring entries (their slot indices now on the cache's device: s18a
#     found them on the CPU), the nvfp4 pass-1 items;
# (2) goal 3: the bench's batch-1 fp32 rows (fla, mamba_ssm, conventional, replay) on this tree and on 6065e45 (the
#     tree before the advance change), one after the other in one call;
# (3) the new default of the pass-1 items' dots (IEEE for nvfp4/fp8+sr, nvfp4/int8+sr; s17c) at B = 64, aligned and
#     staggered, gdn and kda, beside the 3xTF32 items (flush_items_dot=tf32x3, the old default).
#   mkdir -p .gpu/t_6065e45 && git archive 6065e45 kernels quant replayssm_quant scripts pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_6065e45
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=380 bash reports/bench/speed/call_s18b.sh", carry=["TREE.txt", ".whl", ".gpu/t_6065e45"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s18b}
source scripts/gpu/parts.sh s18b "${BUDGET_S:-380}"
part gpu_tests 80 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
  -k "advance or stale or items"
BB="--families gdn,kda,mamba2 --specs fp32 --batches 1 --rep-ms 20"
part bench_b1_new 70 python3 scripts/gpu/bench.py --out "$R/bench_b1_new" $BB
part bench_b1_old 70 bash -c "cd .gpu/t_6065e45 && python3 scripts/gpu/bench.py --out '$R/bench_b1_old_6065e45' $BB"
part b64_items 140 python3 scripts/gpu/launch_sweep.py --out "$R/items_dot" --families gdn,kda \
  --specs nvfp4/fp8+sr,nvfp4/int8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_items_default \
  --variants "default;flush_items_dot=tf32x3"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
