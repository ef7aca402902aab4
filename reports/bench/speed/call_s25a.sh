#!/bin/bash
# Session 2026-12-07, device call s25a (issue 28): the first queued call that fits the card this call gets (a call
# without a kind may come on an H100 or an H200, and a call that names one kind waits for it). On an H200, the goals'
# card, which has no table of the current kernels: call_s19a.sh, the whole bench table (shared keys, the default).
# On any other card: call_s24a.sh, the shared keys' identity check and same-run A/B (the H100 has its table, s23t).
# BUDGET_S and the scripts' other knobs pass through (each script's default budget otherwise: 585 s and 470 s).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s25a.sh", carry=["TREE.txt", ".whl"])
# With little device time left: e.g. BUDGET_S=300 AB_FIRST=1 B256_FAMS=mamba2,gdn B256_SPECS=nvfp4/fp16,fp32
# IDENT_SPECS=nvfp4/fp16 (s24a's knobs) and BATCHES=256 (s19a's: every family's goal rows). A cut s19a returns its
# results.partial.csv; carried back in .gpu/res_s19a (carry it), a later call's --resume continues the table.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash reports/bench/speed/call_s19a.sh
else
  exec bash reports/bench/speed/call_s24a.sh
fi
