#!/bin/bash
# Session 2026-12-07d, device call s29a (issue 28): the goals' card only. On an H200: call_s19a.sh, the whole bench
# table (BATCHES=256 for only the goal rows when time is short). On any other card: call_s29c.sh, the split step's
# launch order (the H100 has the current table, s26t, and the readings with shared keys,
# s28a-s28c).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s29a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
fi
exec bash reports/bench/speed/call_s29c.sh
