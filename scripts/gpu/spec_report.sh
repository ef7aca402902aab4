#!/usr/bin/env bash
# Speculative decoding with prompt-lookup drafts on the GPU, one device call (<= 4 min on an H200):
#
#   bash scripts/gpu/spec_report.sh --out "$OUT" [any other `replayssm-quant spec-report` option]
#
# The embedded models (gdn-demo, mamba2-demo) on the packaged copy tasks (copy, upper: the 16 shortest documents
# per task with targets of <= 256 tokens), fp32 and nvfp4/fp8+sr, drafts ngram:2, ngram:4, ngram:8 beside plain
# greedy decoding: acceptance rate, tokens per model step, wall-time speed-up, and the token-for-token check
# against the non-speculative run. Writes OUT/spec/ (report.md, summary.csv, spec_runs.csv, tokens.jsonl,
# tokens_per_step.png, config.json); copy it to reports/spec-gpu/ to commit it. State-cache kernels: triton where
# the speculative verify kernels exist (kernels/verify.py), else the torch reference (said in the log and in
# config.json). A rerun into the same folder skips finished runs.
set -euo pipefail
OUT_DIR=""
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
if [ -z "$OUT_DIR" ]; then
  echo "usage: bash scripts/gpu/spec_report.sh --out DIR [spec-report options]" >&2
  exit 2
fi
source scripts/gpu/setup.sh
BACKEND=torch
python3 -c "import replayssm_quant.kernels.verify" 2>/dev/null && BACKEND=triton
echo "spec_report.sh: state-cache backend $BACKEND"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
mkdir -p "$OUT_DIR/spec"
time timeout 230 python3 -m replayssm_quant spec-report \
  --model gdn-demo mamba2-demo --tasks copy upper --state fp32 nvfp4/fp8+sr --drafts 2 4 8 \
  --docs 16 --max-len 256 --batch-size 16 --device cuda --backend "$BACKEND" \
  --out "$OUT_DIR/spec" "${ARGS[@]}" 2>&1 | grep -v "^\[transformers\]" || {
  echo "spec_report.sh: stopped (time limit or error); the finished runs are kept, the report is rebuilt from them"
  python3 -m replayssm_quant spec-report --report-only --out "$OUT_DIR/spec"
}
ls -la "$OUT_DIR/spec"
