#!/bin/bash
# Session 2026-12-04, device call 1 (issue 25), after the chunked window became one CUDA graph per SSM layer and its
# read copies are decoded by the Triton dequantizers: GPU tests of both (bit-exact against eager / the torch
# reference), the 4B throughput and chunked-vs-step agreement at 80 rows (each path warmed up first), chunked-all
# with the graphs off (same rows: what the graphs bring), the memory target (16 docs x 10 variants, prefill 4096,
# 4096 positions, one batch of 160 rows), and a profile of chunked-all windows and steps at 80 rows.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s8a}
PACK_EXCLUDE='*.npz'
source scripts/gpu/parts.sh s8a "${BUDGET_S:-575}"
part gpu_tests 150 python3 -m pytest -q -x -p no:cacheprovider tests/eval/test_decode_graphs.py \
  tests/kernels/test_storage_decode.py
part throughput_4b 150 python3 scripts/gpu/kl_scale.py --out "$R/throughput" --shape qwen3_5_4b \
  --parts throughput,agreement --tokens 64
part nographs_4b 80 env REPLAYSSM_CUDA_GRAPHS=0 python3 scripts/gpu/kl_scale.py --out "$R/throughput" \
  --shape qwen3_5_4b --parts throughput --paths chunked-all --tokens 64
part memtarget_4b 220 python3 scripts/gpu/kl_scale.py --out "$R/mem" --shape qwen3_5_4b --parts long \
  --long-docs 16 --long-doc-groups 1 --long-prefill 4096 --long-tokens 4096 --expandable-segments
cat "$R"/mem/long_progress_*.json 2>/dev/null
part profile_4b 110 python3 scripts/gpu/kl_scale.py --out "$R/profile" --shape qwen3_5_4b --parts profile \
  --profile-windows 3 --profile-steps 4
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; pack_split '*.npz'; ls -la "$OUT"
