# Source from a device-call script: `source scripts/gpu/parts.sh NAME BUDGET_S`.
# Results go to $R (= /tmp/NAME_res unless R is set); after every part they are tarred into $OUT/NAME.tgz
# (re-packed without *.ncu-rep when over 15 MB) and the whole log is copied to $OUT/NAME_log.txt, so a call cut
# short still returns what finished. `part PART CAP_S CMD...` runs CMD under timeout min(CAP_S, time left - 8 s),
# logs to $R/PART.log, prints its tail and records rc / wall in $R/parts.tsv; a part with < 10 s left is skipped.
# PACK_EXCLUDE (a tar glob, e.g. '*.npz') leaves bulky files out of NAME.tgz; `pack_split GLOB` then sends those
# in $OUT/NAME_GLOBLESS.tgz.NN pieces of 15 MB (the device returns files of at most 16 MiB).
CALL_NAME=$1
OUT=${OUT:-/tmp/${CALL_NAME}_out}
R=${R:-/tmp/${CALL_NAME}_res}
mkdir -p "$R" "$OUT"
T0=$(date +%s)
END=$((T0 + $2))
LOG="$R/log.txt"
exec > >(tee -a "$LOG") 2>&1
[ -f "$R/parts.tsv" ] || printf 'part\trc\twall_s\tcap_s\n' > "$R/parts.tsv"

pack() {
  tar czf "$OUT/$CALL_NAME.tgz.tmp" ${PACK_EXCLUDE:+--exclude="$PACK_EXCLUDE"} -C "$R" . || return 0
  if [ "$(stat -c %s "$OUT/$CALL_NAME.tgz.tmp")" -gt 15000000 ]; then
    tar czf "$OUT/$CALL_NAME.tgz.tmp" --exclude='*.ncu-rep' -C "$R" .
  fi
  mv "$OUT/$CALL_NAME.tgz.tmp" "$OUT/$CALL_NAME.tgz"; cp "$LOG" "$OUT/${CALL_NAME}_log.txt"
}

pack_split() {
  rm -f "$OUT/${CALL_NAME}_bulk.tgz."*
  (cd "$R" && find . -name "$1" -print0 | tar czf - --null -T -) | split -b 15M -d - "$OUT/${CALL_NAME}_bulk.tgz."
}

part() {
  local name=$1 cap=$2; shift 2
  local now left t rc
  now=$(date +%s); left=$((END - now - 8))
  t=$(( cap < left ? cap : left ))
  if [ "$t" -lt 10 ]; then
    echo "=== $name: skipped (only ${left}s left)"; printf '%s\tskipped\t0\t%s\n' "$name" "$cap" >> "$R/parts.tsv"; return 0
  fi
  echo "=== $name: timeout ${t}s (cap ${cap}s) at +$((now - T0))s: $*"
  timeout -k 5 "$t" "$@" > "$R/$name.log" 2>&1
  rc=$?
  echo "=== $name: rc=$rc after $(( $(date +%s) - now ))s"; tail -n 25 "$R/$name.log"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - now ))" "$cap" >> "$R/parts.tsv"
  pack
  return 0
}

# the machine, recorded once per call (the tree's commit is the lead's: the device copy's git metadata is stale)
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
  [ -f TREE.txt ] && cat TREE.txt; } > "$R/machine.txt" 2>&1
