#!/usr/bin/env bash
# Train, save and evaluate one embedded default model on the GPU, and pack it for the repository.
#
#   bash scripts/gpu/train.sh gdn    --out "$OUT" [extra `replayssm-quant train-demo` options]
#   bash scripts/gpu/train.sh mamba2 --out "$OUT" [--minutes 5 ...]
#
# One model per device call: ~20 s start + --minutes of training (5 by default; compile warm-up
# included) + ~1-2 min of evaluation (held-out bpb at 2K and 16K, 64 task generations) < 9 min.
# Writes (flat, so everything comes back from $OUT):
#   $OUT/<arch>.tar        the model folder <arch>/ (config.json, model.safetensors, tokenizer files,
#                          generation_config.json, train_log.csv, train_meta.json, eval.json,
#                          task_eval.csv); packed even if evaluation failed (the last checkpoint)
#   $OUT/<arch>_train.log  the run's output
#   $OUT/<arch>_eval.json  eval.json alone, for a quick look
# Both models in ONE device call, in parallel on one H200 (setup once, so the two runs do not race;
# setup.sh is idempotent and the runs skip it; TRAIN_DEMO_TIMEOUT keeps the packing inside the call):
#   source scripts/gpu/setup.sh; export TRAIN_DEMO_TIMEOUT=380
#   for a in gdn mamba2; do bash scripts/gpu/train.sh $a --out "$OUT" --minutes 4 --keep-last \
#     >"$OUT/${a}_sh.log" 2>&1 & done; wait
# (on a 2-GPU machine prefix each run with CUDA_VISIBLE_DEVICES=0 / 1). The log lines show the task
# answer bits/byte, teacher-forced byte accuracy and exact match: copying has formed once the byte
# accuracy passes ~0.95 (it jumps from ~0.45 when the attention's copy mechanism appears).
# Install on the dev machine, then regenerate the report and run the tests:
#   tar -xf <arch>.tar -C eval/default_models/
#   replayssm-quant train-demo --report
#   pytest tests/eval/test_default_models.py
set -uo pipefail
arch=${1:?usage: train.sh gdn|mamba2 --out DIR [train-demo options]}
shift
out=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -n "$out" ] || { echo "train.sh: --out DIR is required" >&2; exit 2; }
case "$arch" in gdn|mamba2) ;; *) echo "train.sh: arch must be gdn or mamba2, got $arch" >&2; exit 2 ;; esac
mkdir -p "$out"
source scripts/gpu/setup.sh
work=/tmp/train_demo_$arch
rm -rf "$work"
# hard stop well inside the 10-minute device limit, so the packing below always runs (a cut-off
# evaluation leaves the trained model packed; rerun it with `train-demo --evaluate FOLDER`)
timeout --signal=INT --kill-after=20 "${TRAIN_DEMO_TIMEOUT:-540}" \
  python3 -m replayssm_quant train-demo --arch "$arch" --out "$work" --no-progress "${args[@]}" 2>&1 \
  | grep --line-buffered -v "Loading weights\|Writing model shards" | tee "$out/${arch}_train.log"
rc=${PIPESTATUS[0]}
if [ -d "$work/$arch" ]; then
  tar -cf "$out/$arch.tar" -C "$work" "$arch"
  [ -f "$work/$arch/eval.json" ] && cp "$work/$arch/eval.json" "$out/${arch}_eval.json"
  ls -la "$work/$arch"
fi
exit "$rc"
