#!/usr/bin/env bash
# KL report (issue 5) of the embedded models on their held-out books, on the GPU, in one go.
#
#   bash scripts/gpu/kl.sh --out "$OUT" [--model gdn-demo|mamba2-demo ...] [--parallel] [any other `replayssm-quant eval` option]
#
# --parallel: the models run side by side (one process each on the GPU) instead of one after another.
# Options after the script's own are appended to the eval command: a single-valued one (--docs 16)
# replaces the default here, --state adds a spec to the list (it is repeatable). The long-memory
# models (issue 26 item 3: defaults + nvfp4/int8+sr + nvfp4/e4m3+sr, 16 documents):
#   bash scripts/gpu/kl.sh --out "$OUT" --model gdn-long mamba2-long --parallel --docs 16 \
#     --state nvfp4/int8+sr --state nvfp4/e4m3+sr          # carry: .gpu; ~3-4 min
#
# Per model: prefill 1024 tokens (fp32 model path), then 4096 teacher-forced decode tokens for 32
# held-out windows (2 batches of 16 documents; 131072 tokens per spec, twice the 65536 asked), with
# the fp32 reference (spec fp32, replay) and the specs bf16, fp16, fp8+sr, nvfp4+sr, nvfp4/fp16,
# nvfp4/fp8+sr, fp8/fp16, conventional:fp16+sr, conventional:fp8+sr side by side (batch rows =
# (spec, document) pairs, 10 x 16 = 160 rows). Triton state-cache kernels, CUDA-graphed per layer.
# Measured (H200, --docs 16 --batch-docs 16, reports/kl/README.md): gdn-demo 2 min 28 s (72 s of it
# Triton compile), mamba2-demo 1 min 1 s. If the 10-minute limit cuts
# a run, rerun the same command: finished batches are kept and the run resumes.
# Writes OUT/kl/<model>/ (run.json, records/, report.md, results.csv, buckets.csv, quartiles.csv,
# ratios.csv, kl_vs_position.png, ratio_vs_position.png) and OUT/kl/<model>.log.
# Copy OUT/kl/<model>/ to reports/kl/<model>/ to commit it, without records/ (git-ignored there: the
# CSVs hold the tables and `replayssm-quant report DIR` rebuilds the report from them).
# The data is the held-out books (--data heldout-books; setup.sh points REPLAYSSM_GUTENBERG_DIR at
# them): the packaged default documents are 4096 bytes, shorter than prefill + tokens here.
set -uo pipefail
OUT_DIR=""
ARGS=()
MODELS=(gdn-demo mamba2-demo)
PARALLEL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --model) MODELS=(); shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do MODELS+=("$1"); shift; done ;;
    --parallel) PARALLEL=1; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
if [ -z "$OUT_DIR" ]; then
  echo "usage: bash scripts/gpu/kl.sh --out DIR [--model M ...] [eval options]" >&2
  exit 2
fi
source scripts/gpu/setup.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
mkdir -p "$OUT_DIR/kl"
export TQDM_MININTERVAL=15
run_one() {   # run_one MODEL: the eval of one model, its log, its exit status in OUT/kl/MODEL.rc
  local m=$1
  ( time python3 -m replayssm_quant eval --model "$m" --data heldout-books \
      --prefill 1024 --tokens 4096 --docs 32 --batch-docs 16 \
      --state fp32 --state bf16 --state fp16 --state fp8+sr --state nvfp4+sr --state nvfp4/fp16 \
      --state nvfp4/fp8+sr --state fp8/fp16 --state conventional:fp16+sr --state conventional:fp8+sr \
      --device cuda --backend triton --out "$OUT_DIR/kl/$m" "${ARGS[@]}" ) 2>&1 \
    | grep --line-buffered -v "^\[transformers\]" > "$OUT_DIR/kl/$m.log"
  echo "${PIPESTATUS[0]}" > "$OUT_DIR/kl/$m.rc"
}
for m in "${MODELS[@]}"; do
  echo "=== $m ==="
  if [ "$PARALLEL" = 1 ]; then run_one "$m" & else run_one "$m"; tail -n 5 "$OUT_DIR/kl/$m.log"; fi
done
wait
rc=0
for m in "${MODELS[@]}"; do
  r=$(cat "$OUT_DIR/kl/$m.rc" 2>/dev/null || echo 1)
  [ "$r" -ne 0 ] && rc=$r
  echo "=== $m: exit $r"; grep -A3 "^real" "$OUT_DIR/kl/$m.log"
  [ -f "$OUT_DIR/kl/$m/report.md" ] && sed -n '/## Headline/,/## Mean KL per position quartile/p' "$OUT_DIR/kl/$m/report.md"
  [ -f "$OUT_DIR/kl/$m/report.md" ] && sed -n '/## Shared \/ separate ratio per bucket/,/## Throughput/p' "$OUT_DIR/kl/$m/report.md"
done
exit $rc
