#!/bin/bash
# Session 2026-12-04, device call 2 (issue 25), after the decode session's attention calls became grouped-query
# SDPA without repeat_kv copies (eval/attention.py): the attention check (grouped vs transformers' sdpa, one layer
# of the 4B shape: max difference and time), then the long run of the 4B shape: 16 documents x 10 variants,
# prefill 1024, 16384 positions, chunked-all, bf16 weights, expandable segments, in 2 document batches of 80 rows
# (each written when done; RESUME=1 continues a cut run from the records in $R).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s8b}
PACK_EXCLUDE='*.npz'
source scripts/gpu/parts.sh s8b "${BUDGET_S:-585}"
[ -z "${RESUME:-}" ] && part attention_check 60 python3 scripts/gpu/attention_check.py --out "$R/attention"
part long_4b "${LONG_CAP:-560}" python3 scripts/gpu/kl_scale.py --out "$R/long" --shape qwen3_5_4b --parts long \
  --expandable-segments --long-doc-groups 2 ${RESUME:+--resume}
cat "$R"/long/long_progress_*.json 2>/dev/null
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; pack_split '*.npz'; ls -la "$OUT"
