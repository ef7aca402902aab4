#!/bin/bash
# Session 2026-12-02c, device call 1 (issue 25): the long run of the 4B shape (16 documents x 10 variants, prefill
# 1024, 16384 positions, chunked-all, bf16 weights, expandable segments) in 2 document batches of 80 rows, each
# written when done; a call cut before the second batch ends is continued by RESUME=1 (the records stay in
# $R on a warm machine). Then, with what is left: the sync check of one chunked-all window and one step.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s7a}
PACK_EXCLUDE='*.npz'
source scripts/gpu/parts.sh s7a "${BUDGET_S:-585}"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv
part long_4b "${LONG_CAP:-570}" python3 scripts/gpu/kl_scale.py --out "$R/long" --shape qwen3_5_4b --parts long \
  --expandable-segments --long-doc-groups 2 ${RESUME:+--resume}
cat "$R"/long/long_progress_*.json 2>/dev/null
part sync_check 90 python3 scripts/gpu/sync_check.py --out "$R/sync" --shape qwen3_5_4b --layers 4 --docs 8 --prefill 64
[ -n "${AGREE:-}" ] && part agreement_4b 130 python3 scripts/gpu/kl_scale.py --out "$R/agreement" --shape qwen3_5_4b \
  --parts throughput,agreement --docs 4 --tokens 64
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; pack_split '*.npz'; ls -la "$OUT"
