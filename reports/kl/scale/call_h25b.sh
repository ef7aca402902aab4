#!/bin/bash
# Issue 25 (h25b): after the sync removal and the window host-work cuts: (a) the sync check of one chunked-all window
# and one step, (b) the Qwen3.5-4B profile (per-window wall, launches, syncs), (c) the chunked vs step agreement on
# the batched path (4 docs x 10 variants, 64 positions), (d) the long run (16 docs x 10 variants, prefill 1024, 16384
# positions, chunked-all, expandable segments) in document batches, resumable, for the rest of the call.
# Run from the repository root:   bash .gpu/calls/call_h25b.sh
# Results in /tmp/h25bres, re-tarred after every part into $OUT/h25b.tgz (the long run's per-position arrays, needed
# only to resume it, into $OUT/h25b_long_records.tgz); $OUT/h25b_log.txt is the whole log. Total wall <= 540 s: each
# part under `timeout`, capped by what is left of the budget.
#   part            expected   cap
#   setup           ~15 s
#   sync_check      ~60 s      120 s  (4B shape cut to 4 layers: 3 GDN + 1 attention, 8 docs x 10 variants, prefill 64:
#                                      the profile's batch per cache, so its Triton compiles are reused by the profile)
#   profile_4b      ~110 s     170 s  (as on 2026-12-02: ~120 s; 1+3+3 windows and 1+4+4 steps of 80 rows, prefill 1024)
#   agreement_4b    ~70 s      120 s  (step, chunked, chunked-all of 40 rows x 64 positions after prefill 1024)
#   long_4b         the rest (~250 s; cut by its timeout: long_progress_*.json says how far it got)
# Long run: H25_LONG_GROUPS document batches (default 2: 80 rows each, ~45 GB of KV cache at 17k tokens); a batch's
# records are written when it is done. To resume in a later call, put a previous h25b_long_records.tgz where this
# script can read it and set H25_LONG_RESUME=path/to/h25b_long_records.tgz (finished batches are skipped).
set -u
OUT=${OUT:-/tmp/h25bout}
R=/tmp/h25bres
rm -rf "$R" && mkdir -p "$R" "$OUT"
T0=$(date +%s)
END=$((T0 + ${H25_BUDGET_S:-540}))
LOG="$R/log.txt"
exec > >(tee -a "$LOG") 2>&1

pack() {
  tar czf "$OUT/h25b.tgz.tmp" -C "$R" --exclude='*.npz' . && mv "$OUT/h25b.tgz.tmp" "$OUT/h25b.tgz"
  if [ -d "$R/long" ]; then
    tar czf "$OUT/h25b_long_records.tgz.tmp" -C "$R" long && mv "$OUT/h25b_long_records.tgz.tmp" "$OUT/h25b_long_records.tgz"
  fi
  cp "$LOG" "$OUT/h25b_log.txt"
}

# part NAME CAP_S CMD...: run CMD under timeout min(CAP_S, time left - 10 s); log to $R/NAME.log; record in parts.tsv
part() {
  local name=$1 cap=$2; shift 2
  local now left t rc
  now=$(date +%s); left=$((END - now - 10))
  t=$(( cap < left ? cap : left ))
  if [ "$t" -lt 20 ]; then
    echo "=== $name: skipped (only ${left}s left)"; printf '%s\tskipped\t0\t%s\n' "$name" "$cap" >> "$R/parts.tsv"; return 0
  fi
  echo "=== $name: timeout ${t}s (cap ${cap}s) at +$((now - T0))s: $*"
  timeout -k 5 "$t" "$@" > "$R/$name.log" 2>&1
  rc=$?
  echo "=== $name: rc=$rc after $(( $(date +%s) - now ))s"; tail -n 30 "$R/$name.log"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - now ))" "$cap" >> "$R/parts.tsv"
  pack
  return 0
}

printf 'part\trc\twall_s\tcap_s\n' > "$R/parts.tsv"
GROUPS_=${H25_LONG_GROUPS:-2}
# H25_SMOKE=1: the same parts on the CPU with tiny shapes (a check of this script's plumbing, no measurement)
if [ "${H25_SMOKE:-0}" = 1 ]; then
  Q4=tiny-qwen3_5
  SC=(--shape tiny-qwen3_5 --docs 1 --prefill 4 --window 4 --dtype float32)
  P=(--docs 1 --prefill 4 --window 4 --profile-windows 1 --profile-steps 1)
  A=(--docs 1 --prefill 4 --tokens 8 --window 4)
  LG=(--long-docs 2 --long-prefill 4 --long-tokens 64 --window 4)
  LONG_CAP=60
else
  source scripts/gpu/setup.sh
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
  git log --oneline -1
  Q4=qwen3_5_4b
  SC=(--shape qwen3_5_4b --layers 4 --docs 8 --prefill 64)
  P=(--profile-windows 3 --profile-steps 4)              # defaults: 8 docs x 10 variants, prefill 1024, L = 16
  A=(--docs 4 --tokens 64)
  LG=()                                                  # defaults: 16 docs, prefill 1024, 16384 positions, chunked-all
  LONG_CAP=600
fi
RESUME=()
if [ -n "${H25_LONG_RESUME:-}" ] && [ -f "$H25_LONG_RESUME" ]; then
  tar xzf "$H25_LONG_RESUME" -C "$R" && RESUME=(--resume) && echo "long: resuming from $H25_LONG_RESUME"
fi

part sync_check 120 python3 scripts/gpu/sync_check.py --out "$R/sync" "${SC[@]}"
part profile_4b 170 python3 scripts/gpu/kl_scale.py --out "$R/profile" --shape $Q4 --parts profile "${P[@]}"
part agreement_4b 120 python3 scripts/gpu/kl_scale.py --out "$R/agreement" --shape $Q4 --parts throughput,agreement "${A[@]}"
# the long run writes into $R/long/long_<tag>/ (records, batches) and $R/long/long_progress_<tag>.json
part long_4b $LONG_CAP python3 scripts/gpu/kl_scale.py --out "$R/long" --shape $Q4 --parts long --expandable-segments \
  --long-doc-groups "$GROUPS_" "${LG[@]}" "${RESUME[@]}"
cat "$R"/long/long_progress_*.json 2>/dev/null
[ "${H25_SMOKE:-0}" = 1 ] || nvidia-smi --query-gpu=memory.used --format=csv
echo "=== done at +$(( $(date +%s) - T0 ))s"
cat "$R/parts.tsv"
pack
