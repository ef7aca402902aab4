#!/bin/bash
# Session 2026-12-07h, device call s33a (issue 28): on an H200, the goals' card, call_s19a.sh (the whole bench table
# of the current kernels); on any other card call_s33b.sh (Nsight Compute on the B = 64 nvfp4/fp16 step: goal 1b's
# limit on the current kernels), then with the time left call_s32c.sh (Nsight Compute on gdn's batch-1 step in
# 16-row 4-warp and 8-row one-warp programs beside fla).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s33a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
fi
echo "call_s33a: not an H200 ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)): call_s33b.sh," \
     "then call_s32c.sh"
T_S33A=$(date +%s)
BUDGET_S=400 bash reports/bench/speed/call_s33b.sh
LEFT=$(( ${BUDGET_S:-570} - ($(date +%s) - T_S33A) - 10 ))
if [ "$LEFT" -ge 120 ]; then
  BUDGET_S=$LEFT bash reports/bench/speed/call_s32c.sh
else
  echo "call_s33a: ${LEFT}s left, call_s32c.sh not run"
fi
