#!/bin/bash
# Session 2026-12-04, device call 4 (issue 25): the lm-eval plugin's generation tokens/s on the 4B shape on the
# final tree (grouped-query attention for its padded batches, chunk graphs, Triton decode), as on 12-02.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s8d}
source scripts/gpu/parts.sh s8d "${BUDGET_S:-200}"
part generate_4b 150 python3 scripts/gpu/kl_scale.py --out "$R/generate" --shape qwen3_5_4b --parts generate \
  --gen-prompts 16 --gen-tokens 64
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
