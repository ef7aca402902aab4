#!/usr/bin/env bash
# Memory measurements of the embedded models on the GPU (one device call, ~3-4 min), once the
# long-memory weights are committed in eval/default_models/{gdn-long,mamba2-long}:
#
#   bash scripts/gpu/longmem_report.sh --out "$OUT" [models, default: gdn-long mamba2-long gdn mamba2]
#   carry: .gpu (the books)
#
# Per model folder (copied to a work folder; the checkout is not written): for the -long models
# `train-demo --evaluate` (fp32 held-out bits/byte on every held-out window at 2K and 16K, 256
# recall instances by distance quartile), and for every model `train-demo --memory` (per-head
# decay, state reset at 2048 with bits/byte by distance up to +1024, recall with a reset before the
# query). Two processes (GDN family, Mamba-2 family) share the GPU. Writes into --out:
# <name>_measure.tar (<name>/eval.json, task_eval.csv, memory.json, decay.csv; whatever exists) and
# <family>_measure.log. Install on the dev machine, then regenerate the report:
#   for f in *_measure.tar; do tar -xf "$f" -C eval/default_models/; done
#   python -m replayssm_quant train-demo --report --report-dir reports/models
# LONGMEM_LIMIT (default 540 s) stops what still runs so the packing happens inside the call.
# CPU smoke test (tiny folders written by the train_long.sh smoke test):
#   RQ_SETUP_DONE=1 REPLAYSSM_GUTENBERG_DIR=../shared/data/gutenberg LONGMEM_MODELS_DIR=/tmp/tl_work \
#   LONGMEM_EVAL_ARGS="--eval-contexts 256 --eval-max-windows 2 --eval-tasks 8 --eval-recall-max-dist 300" \
#   LONGMEM_MEMORY_ARGS="--memory-windows 2 --memory-reset-at 64 --memory-decay-window 256 --memory-recall 8" \
#     bash scripts/gpu/longmem_report.sh --out /tmp/lr gdn-long mamba2-long
set -uo pipefail
T0=$(date +%s)
out=""
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
[ -n "$out" ] || { echo "longmem_report.sh: --out DIR is required" >&2; exit 2; }
[ ${#models[@]} -gt 0 ] || models=(gdn-long mamba2-long gdn mamba2)
mkdir -p "$out"
source scripts/gpu/setup.sh
LIMIT=${LONGMEM_LIMIT:-540}
work=${LONGMEM_WORK:-/tmp/longmem_report}
rm -rf "$work" && mkdir -p "$work"
src=${LONGMEM_MODELS_DIR:-eval/default_models}
export LONGMEM_EVAL_ARGS=${LONGMEM_EVAL_ARGS:-} LONGMEM_MEMORY_ARGS=${LONGMEM_MEMORY_ARGS:-}
for m in "${models[@]}"; do
  [ -f "$src/$m/config.json" ] || { echo "longmem_report.sh: $src/$m is missing (no config.json)" >&2; exit 2; }
  cp -r "$src/$m" "$work/$m"
done

measure() {   # measure MODEL...: evaluate the -long ones, then the memory of each, in order
  for m in "$@"; do
    case "$m" in
      *-long) python3 -m replayssm_quant train-demo --evaluate "$work/$m" --no-progress --eval-tasks 256 $LONGMEM_EVAL_ARGS ;;
    esac
    python3 -m replayssm_quant train-demo --memory "$work/$m" --no-progress $LONGMEM_MEMORY_ARGS
  done
}
gdn=(); mamba=()
for m in "${models[@]}"; do case "$m" in gdn*) gdn+=("$m") ;; *) mamba+=("$m") ;; esac; done
pids=()
for fam in gdn mamba; do
  declare -n list=$fam
  [ ${#list[@]} -gt 0 ] || continue
  left=$(( LIMIT - ($(date +%s) - T0) ))
  ( export -f measure; export work
    timeout --signal=INT --kill-after=15 "$left" bash -c 'measure "$@"' _ "${list[@]}" 2>&1 \
      | grep --line-buffered -v "Loading weights\|Writing model shards" > "$out/${fam}_measure.log" ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for m in "${models[@]}"; do
  files=()
  for f in eval.json task_eval.csv memory.json decay.csv; do [ -f "$work/$m/$f" ] && files+=("$m/$f"); done
  [ ${#files[@]} -gt 0 ] && tar -cf "$out/${m}_measure.tar" -C "$work" "${files[@]}"
done
echo "elapsed_s $(( $(date +%s) - T0 ))"
ls -la "$out"
grep -h "heads keep\|held-out bits\|Q[1-4] " "$out"/*_measure.log
