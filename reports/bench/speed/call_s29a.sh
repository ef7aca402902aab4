#!/bin/bash
# Session 2026-12-07d, device call s29a (issue 28): the goals' card only. On an H200: call_s19a.sh, the whole bench
# table (BATCHES=256 for only the goal rows when time is short). On any other card nothing is queued (the H100 has
# the current table, s26t, and the readings with shared keys, s28a-s28c): it records the card and stops, so a call
# that gets an H100 costs only the machine's start.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s29a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
fi
echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader); nothing queued for this card"
