#!/bin/bash
# Session 2026-12-06c, device call s19b (issue 28). The batch-1 reading of gdn nvfp4/fp8+sr that two whole-table runs
# on two cards gave alike (aligned 8.016 us in s15b on an H200 and in s18e on an H100) while its own split
# ((15 x non-flush + flush) / 16) and the staggered step say ~9-10 us, and s16a's launch_sweep (a fresh process, B = 1
# only) gave 10.245. Does the reading depend on what ran before it in the process? (1) The bench with B = 1 alone,
# (2) the bench with B = 256 first and B = 1 after (the table's order), (3) launch_sweep with all four phases,
# nvfp4/fp16 beside it each time (its readings agree with its split). Since session 2026-12-06c each bench row also
# says whether the counters after its timed whole rounds show every step and flush ran (`rounds_ok`): a low
# reading with rounds_ok false would be skipped flushes, not a faster step.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=420 bash reports/bench/speed/call_s19b.sh", carry=["TREE.txt", ".whl"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s19b}
source scripts/gpu/parts.sh s19b "${BUDGET_S:-420}"
S="--families gdn --specs nvfp4/fp8+sr,nvfp4/fp16"
part b1_alone 130 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/b1_alone" $S --batches 1
part b256_then_b1 150 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/b256_then_b1" $S --batches 256,1
part sweep_b1 100 python3 scripts/gpu/launch_sweep.py --out "$R/sweep" $S --batch 1 \
  --phases step,staggered,nonflush,flush --rep-ms 10 --stem b1_phases --variants "default"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
