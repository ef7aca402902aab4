#!/bin/bash
# Session 2026-12-07d, device call s28b (issue 28). On an H200: call_s19a.sh, the whole bench table (the goals'
# card; BATCHES=256 for only the goal rows). On any other card, the readings that ran with a key per value head
# although the table times shared keys (profile_step.py and the device checks took no num_key_heads until
# 2026-12-07d): the device checks with shared keys (bench.py at batch 1, fp32, which runs every family's checks and
# their anchors), goal 1b's per-kernel split (call_s23b.sh) and Nsight Compute at B = 256 (call_s16b.sh).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="bash reports/bench/speed/call_s28b.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
# READINGS=1: the readings on any card (a second call on a warm H200, after the table).
if [ "${READINGS:-0}" != 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
fi
(
  source scripts/gpu/setup.sh
  R=$PWD/.gpu/res_s28b
  source scripts/gpu/parts.sh s28b 130
  part checks 120 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/checks" --families gdn,kda,mamba2 --specs fp32 \
    --batches 1
  pack
)
BUDGET_S=110 bash reports/bench/speed/call_s23b.sh
BUDGET_S=140 bash reports/bench/speed/call_s16b.sh
