#!/usr/bin/env bash
# Downstream accuracy of the long-memory models on the tasks that need their state (issue 26 item 4),
# by fp32 generation-length quartile, in one device call (~4 min on an H200):
#
#   bash scripts/gpu/downstream_long.sh --out "$OUT" [--model gdn-long mamba2-long] [downstream options]
#   carry: .whl (the lm-eval wheels listed in downstream.sh; the tasks are packaged, no books needed)
#
# Tasks (tag replayssm_long, eval/tasks): replayssm_count (64 held-out "count S E" prompts; the model
# writes S..E, 16..1946 bytes, and must stop at E, which only its state still holds by then) and
# replayssm_recall (64 held-out key-value recalls 64..3072 bytes back; 4 generated tokens, so its
# quartiles are of ties: read it by distance, see the samples). Specs: fp32 (the reference, always),
# nvfp4+sr, nvfp4/fp8+sr, nvfp4/fp16, fp8+sr, conventional:fp8+sr.
# Parallel: one process per (model, spec group) shares the GPU, groups "nvfp4+sr nvfp4/fp8+sr" and
# "nvfp4/fp16 fp8+sr conventional:fp8+sr"; each also runs the fp32 reference (same batching, so the
# same generations: the merge checks that the two fp32 run files are identical and keeps one).
# --max-batch-tokens 140000: all 64 counting requests (prompts <= 15 tokens + max_gen_toks 2112)
# decode as one batch (a batch runs until its longest row stops), the recall prompts (<= 3.1K
# tokens) in two. DOWNSTREAM_LONG_LIMIT (default 540 s) stops what still runs; finished runs stay.
# Writes OUT/downstream_long/ (runs/MODEL/*.jsonl, config.json, README.md, downstream_quartiles.csv,
# downstream_delta_pp.png) and OUT/downstream_long_<model>_<group>.log. Copy the folder to
# reports/downstream_long/ to commit it. A call cut off by the limit: carry OUT/downstream_long back
# (e.g. as .gpu/dsl) and rerun with --resume-from .gpu/dsl: its finished runs are not redone.
set -uo pipefail
T0=$(date +%s)
OUT_DIR=""
ARGS=()
MODELS=(gdn-long mamba2-long)
RESUME=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --resume-from) RESUME="$2"; shift 2 ;;
    --model) MODELS=(); shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do MODELS+=("$1"); shift; done ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[ -n "$OUT_DIR" ] || { echo "usage: bash scripts/gpu/downstream_long.sh --out DIR [--model M ...] [downstream options]" >&2; exit 2; }
source scripts/gpu/setup.sh
python3 scripts/gpu/lm_eval_check.py || exit 2
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
LIMIT=${DOWNSTREAM_LONG_LIMIT:-540}
export TQDM_MININTERVAL=15
DEVICE=${DOWNSTREAM_LONG_DEVICE:-cuda}
BACKEND=$([ "$DEVICE" = cuda ] && echo triton || echo torch)
GROUPS_=("nvfp4+sr nvfp4/fp8+sr" "nvfp4/fp16 fp8+sr conventional:fp8+sr")
final="$OUT_DIR/downstream_long"
work=${DOWNSTREAM_LONG_WORK:-/tmp/downstream_long}
rm -rf "$work" && mkdir -p "$work" "$final/runs"
pids=()
for m in "${MODELS[@]}"; do
  for g in 0 1; do
    if [ -n "$RESUME" ] && [ -f "$RESUME/config.json" ]; then   # finished runs are skipped
      mkdir -p "$work/$m.$g/runs/$m" && cp "$RESUME/config.json" "$work/$m.$g/"
      cp "$RESUME/runs/$m"/*.jsonl "$work/$m.$g/runs/$m/" 2>/dev/null
    fi
    left=$(( LIMIT - ($(date +%s) - T0) ))
    # shellcheck disable=SC2086
    ( timeout --signal=INT --kill-after=15 "$left" python3 -m replayssm_quant downstream --model "$m" \
        --tasks replayssm_long --state ${GROUPS_[$g]} --batch-size 128 --max-batch-tokens 140000 \
        --device "$DEVICE" --backend "$BACKEND" --out "$work/$m.$g" "${ARGS[@]}" 2>&1 \
      | grep --line-buffered -v "^\[transformers\]" > "$OUT_DIR/downstream_long_${m}_$g.log"
      echo "exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" >> "$OUT_DIR/downstream_long_${m}_$g.log" ) &
    pids+=($!)
  done
done
for p in "${pids[@]}"; do wait "$p"; done
rc=0
for m in "${MODELS[@]}"; do
  mkdir -p "$final/runs/$m"
  for g in 0 1; do
    src="$work/$m.$g"
    [ -f "$src/config.json" ] && { [ -f "$final/config.json" ] || cp "$src/config.json" "$final/"; }
    cmp -s "$src/config.json" "$final/config.json" || { echo "downstream_long.sh: $src/config.json differs" >&2; rc=1; }
    for f in "$src/runs/$m"/*.jsonl; do
      [ -f "$f" ] || continue
      dst="$final/runs/$m/$(basename "$f")"
      if [ -f "$dst" ]; then
        cmp -s "$f" "$dst" || { echo "downstream_long.sh: $m $(basename "$f") differs between the groups" >&2; rc=1; }
      else
        cp "$f" "$dst"; cp "${f%.jsonl}.results.json" "$final/runs/$m/" 2>/dev/null   # lm-eval's aggregate, timing
      fi
    done
  done
done
python3 -m replayssm_quant downstream --report-only --out "$final" || rc=1
echo "elapsed_s $(( $(date +%s) - T0 ))"
ls -la "$final" "$final"/runs/*
tail -n 2 "$OUT_DIR"/downstream_long_*.log
exit $rc
