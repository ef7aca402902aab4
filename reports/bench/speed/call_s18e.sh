#!/bin/bash
# Session 2026-12-06b, device call s18e (issue 28; queued). SECOND of the two table calls, after call_s18d.sh on the
# same card: the bench table's gdn and kda rows with the fla anchors and the device checks, resumed into the folder
# of s18d's mamba2 rows (s18d's bench/ folder carried as .gpu/res_s18e/bench/: results.csv and correctness.csv, or
# results.partial.csv if s18d was cut), as s15b resumed s15a's.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s18e.sh", carry=["TREE.txt", ".whl", ".gpu/res_s18e"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s18e}
source scripts/gpu/parts.sh s18e "${BUDGET_S:-560}"
[ -f "$R/bench/results.partial.csv" ] || [ -f "$R/bench/results.csv" ] || echo "!! no carried mamba2 rows: the table will lack them"
part bench 540 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families gdn,kda \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
