#!/bin/bash
# Session 2026-12-07c, device call s27a (issue 28): the first queued call that fits the card this call gets, now that
# the H100 has the table of the current kernels (s26t) and the shared keys are checked and timed (s26a). On an
# H200, the goals' card: call_s19a.sh, the whole bench table (BATCHES=256 for only the goal rows when time is
# short). On any other card: call_s16b.sh, Nsight Compute on the current kernels (until s23b ran on an H100, in
# session 2026-12-07c: call_s23b.sh, goal 1b's per-kernel split of the B = 64 and 16 steps).
# BUDGET_S and the scripts' other knobs pass through (each script's default budget otherwise: 585 s and 540 s).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=540 bash reports/bench/speed/call_s27a.sh", carry=["TREE.txt", ".whl"])
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
else
  exec bash reports/bench/speed/call_s16b.sh
fi
