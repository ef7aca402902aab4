#!/bin/bash
# Session 2026-12-07d, device call s29a (issue 28): the goals' card only. On an H200: call_s19a.sh, the whole bench
# table (BATCHES=256 for only the goal rows when time is short). On any other card it ran call_s29c.sh (session
# 2026-12-07e, on an H100: the split step's launch order); nothing else is queued for an H100 now, so it stops there.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s29a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
fi
echo "call_s29a: not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)):" \
     "the H100 readings are done (reports/bench/speed/README.md, status); nothing run"
