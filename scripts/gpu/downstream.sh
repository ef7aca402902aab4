#!/usr/bin/env bash
# Downstream accuracy by generation-length quartile (issue 6) on the GPU, in one go.
#
#   bash scripts/gpu/downstream.sh --out "$OUT" [--model gdn-demo] [--resume-from DIR]
#                                  [any other `replayssm-quant downstream` option]
#
# Runs the embedded models (gdn-demo, mamba2-demo) on the packaged synthetic long-generation tasks
# (tag replayssm_synth: replayssm_copy + replayssm_upper, 64 held-out instances each, 32..2000
# generated tokens) through lm-eval with the replayssm plugin: the fp32 reference and the specs
# nvfp4+sr, nvfp4/fp8+sr, nvfp4/fp16, fp8+sr, conventional:fp8+sr. Writes OUT/downstream/
# (runs/MODEL/RUN.jsonl per finished run, config.json, README.md, downstream_quartiles.csv,
# downstream_delta_pp.png). Copy that folder to reports/downstream/ to commit it.
# Batching: --batch-size 128 caps the rows of a decode batch, and the downstream command's default
# token budget (--max-batch-tokens 65536: rows x (longest prompt of the batch + max_gen_toks) <= 65536)
# caps its padded size, so a prefill never holds 128 long prompts at once (that reached 121 GiB and
# OOM'd a process beside it). With these tasks (prompts 34..1788 tokens, max_gen_toks 2112) a batch
# holds 16..30 rows. Pass --max-batch-tokens N to change it (0 = no budget: the old, unsafe batching).
# The budget is recorded in OUT/downstream/config.json (it changes which slot, hence which
# stochastic-rounding draws, a request gets): a folder written before the budget existed (no
# max_batch_tokens in its config.json) resumes only with --max-batch-tokens 0; otherwise use a new one.
# Rerunning into the same folder skips finished runs; a run per model also works, the report of
# a folder holding both is rebuilt with `replayssm-quant downstream --report-only --out DIR`.
# If a call runs out of time, the finished runs still come back under OUT/downstream: commit or
# carry that folder and pass it as --resume-from DIR on the next call (it is copied into
# OUT/downstream first, so only the missing runs are evaluated).
#
# lm-eval and datasets are not on the GPU image: carry these wheels (cp312 manylinux for the
# binary ones) in .whl/ (scripts/gpu/setup.sh installs them with pip --no-deps --target):
#   lm_eval==0.4.13 datasets==5.2.0 pyarrow==26.0.1 dill==0.4.1 multiprocess==0.70.19
#   xxhash==4.1.0 sacrebleu==2.6.0 portalocker==4.4.2 tabulate==0.10.0 lxml==6.1.3
#   colorama==0.4.6 requests==2.34.2 urllib3==2.8.0
# (measured: simple_evaluate on the packaged tasks in an environment holding only the GPU
# image's packages plus these).
set -euo pipefail
OUT_DIR=""
ARGS=()
MODELS=(gdn-demo mamba2-demo)
RESUME=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --resume-from) RESUME="$2"; shift 2 ;;
    --model) MODELS=(); shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do MODELS+=("$1"); shift; done ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
if [ -z "$OUT_DIR" ]; then
  echo "usage: bash scripts/gpu/downstream.sh --out DIR [--model M ...] [downstream options]" >&2
  exit 2
fi
source scripts/gpu/setup.sh
python3 scripts/gpu/lm_eval_check.py
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
mkdir -p "$OUT_DIR/downstream"
if [ -n "$RESUME" ]; then
  [ -d "$RESUME/runs" ] || { echo "downstream.sh: --resume-from $RESUME has no runs/ folder" >&2; exit 2; }
  cp -r "$RESUME"/config.json "$RESUME"/runs "$OUT_DIR/downstream/"
  echo "downstream.sh: resuming from $RESUME ($(ls "$RESUME"/runs/*/*.jsonl | wc -l) finished runs)"
fi
time python3 -m replayssm_quant downstream \
  --model "${MODELS[@]}" \
  --tasks replayssm_synth \
  --state nvfp4+sr nvfp4/fp8+sr nvfp4/fp16 fp8+sr conventional:fp8+sr \
  --batch-size 128 --device cuda --backend triton \
  --out "$OUT_DIR/downstream" "${ARGS[@]}" 2>&1 | grep -v "^\[transformers\]"
ls -la "$OUT_DIR/downstream" "$OUT_DIR/downstream/runs"/*
