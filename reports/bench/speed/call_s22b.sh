#!/bin/bash
# Session 2026-12-06e, device call s22b (issue 28; replaces the queued call_s19e.sh, whose two bench.py runs also
# re-timed the conventional rows and anchors). The issue lists "the bf16 ring as default where activations are bf16";
# the bench's activations are bf16, which a bf16 ring holds exactly (the same bits as a float32 ring:
# docs/CONTRACTS.md), yet the table times float32 rings, and the one A/B (ring_bf16_44b6032/, H200) predates the
# kernel changes of 2026-12-04 to 2026-12-06. Replay rows of every family, fp32, nvfp4/fp16 and fp8+sr, B = 256 and 1,
# step / non-flush / flush step, each configuration with the float32 and the bf16 ring in turn (launch_sweep
# --ring-dtypes); B = 256 again in the other order.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=440 bash reports/bench/speed/call_s22b.sh", carry=["TREE.txt"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s22b}
source scripts/gpu/parts.sh s22b "${BUDGET_S:-440}"
S="--families gdn,kda,mamba2 --specs fp32,nvfp4/fp16,fp8+sr --phases step,nonflush,flush --rep-ms 10"
part b256 200 python3 scripts/gpu/launch_sweep.py --out "$R/ring" $S --batch 256 --stem b256_ring \
  --ring-dtypes float32,bfloat16
part b1 80 python3 scripts/gpu/launch_sweep.py --out "$R/ring" $S --batch 1 --stem b1_ring --ring-dtypes float32,bfloat16
part b256_again 140 python3 scripts/gpu/launch_sweep.py --out "$R/ring" $S --batch 256 --stem b256_ring_again \
  --ring-dtypes bfloat16,float32
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
