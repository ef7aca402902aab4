#!/bin/bash
# Session 2026-12-07d, device call s29a (issue 28): the bench table of the current kernels, call_s19a.sh, on whichever
# card comes (name it as an H200 call: the goals' card; BATCHES=256 for only the goal rows when time is short). Until
# session 2026-12-07f it ran the table only on an H200 and stopped on an H100 (2026-12-07e: call_s29c.sh there), as
# the H100 then had a table of its kernels; since the load-order change (155f531) the H100's bench_h100/ (s26t,
# 59238c7) is older than the kernels too (ab_s31/bench_b1_b64/ re-read its B = 1 column and most of B = 64).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=570 bash reports/bench/speed/call_s29a.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
echo "call_s29a: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1): the bench table (call_s19a.sh)"
exec bash reports/bench/speed/call_s19a.sh
