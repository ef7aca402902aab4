#!/bin/bash
# Issue 28: the measured limits behind each missed decode-speed goal, then the missing bench rows (one H200 call).
# Run from the repository root with `.whl` carried:   bash .gpu/calls/call_h28.sh
# Everything lands in /tmp/h28res and is re-tarred into $OUT/h28.tgz after every part (so a call cut short
# still returns what finished); $OUT/h28_log.txt is the whole log. Total wall <= ~525 s (each part under
# `timeout`, capped by what is left of the budget; parts in priority order).
set -u
OUT=${OUT:-/tmp/h28out}
R=/tmp/h28res
rm -rf "$R" && mkdir -p "$R" "$OUT"
T0=$(date +%s)
END=$((T0 + ${H28_BUDGET_S:-520}))
LOG="$R/log.txt"
exec > >(tee -a "$LOG") 2>&1

pack() {   # (files back are <= 16 MB each: without the binary ncu reports when the tar is larger)
  tar czf "$OUT/h28.tgz.tmp" -C "$R" . || return 0
  if [ "$(stat -c %s "$OUT/h28.tgz.tmp")" -gt 15000000 ]; then tar czf "$OUT/h28.tgz.tmp" --exclude='*.ncu-rep' -C "$R" .; fi
  mv "$OUT/h28.tgz.tmp" "$OUT/h28.tgz"; cp "$LOG" "$OUT/h28_log.txt"
}

# part NAME CAP_S CMD...: run CMD under timeout min(CAP_S, time left - 8 s); log to $R/NAME.log; record in parts.tsv
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

printf 'part\trc\twall_s\tcap_s\n' > "$R/parts.tsv"
# H28_SMOKE=1: the same parts on the CPU (Triton interpreter, tiny shapes, a stand-in for ncu that just runs the
# program): a check of this script's plumbing, no measurement
if [ "${H28_SMOKE:-0}" = 1 ]; then
  export TRITON_INTERPRET=1
  X=(--cpu-smoke); XN=(--cpu-smoke --window 4); XP=(--cpu-smoke --window 4 --rounds 1); XB=(--cpu-smoke --window 4)
  B256=2; B64=2; B1=1; SPECS=fp32,nvfp4/fp16; FAMS_BENCH="gdn"
  printf '#!/bin/bash\ncase "$1" in -i) echo "  _fake_kernel"; exit 0;; --version) echo "fake ncu"; exit 0;; esac\nwhile [ $# -gt 0 ] && [ "$1" != python3 ]; do shift; done\nexec "$@"\n' > /tmp/h28_fake_ncu
  chmod +x /tmp/h28_fake_ncu; NCU=/tmp/h28_fake_ncu
else
  X=(); XN=(); XP=(--rounds 2); XB=(--rep-ms 10)
  B256=256; B64=64; B1=1; SPECS=fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr; FAMS_BENCH="kda mamba2"
  NCU=
fi
source scripts/gpu/setup.sh
git log -1 --format='commit %H %s' 2>/dev/null || true
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  > "$R/nvidia_smi.csv" 2>&1; cat "$R/nvidia_smi.csv"
[ -z "$NCU" ] && NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: ${NCU:-none}"; [ -n "$NCU" ] && "$NCU" --version | tail -n 1
echo "setup done at +$(( $(date +%s) - T0 ))s"

PROF=(python3 scripts/gpu/profile_step.py --families gdn "${XP[@]}")
# 1. torch.profiler, gdn B = 256: the non-flush / flush kernel split of every missed 8-bit / nvfp4 / fp32 goal
#    (also compiles the kernels the ncu parts below reuse from Triton's cache)
part prof_b256 100 "${PROF[@]}" --out "$R/prof_b256" --batch $B256 --specs fp32,nvfp4/fp16,fp8+sr,int8+sr

# 2. Nsight Compute on the nvfp4/fp16 non-flush and flush kernels (goal 1): one non-flush step (ring count L - 2)
#    and the flush step; sections: speed of light, memory workload (DRAM bytes), occupancy, launch (registers),
#    warp stall reasons, scheduler issue, compute pipes
NCU_ARGS=(--clock-control none --profile-from-start off -k "regex:_(non)?flush_kernel|_decode_step_kernel"
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
          --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum -f)
ncu_part() {   # ncu_part NAME CAP PROFILE_STEP_ARGS...
  local name=$1 cap=$2; shift 2
  if [ -z "$NCU" ]; then echo "=== $name: no ncu"; return 0; fi
  part "$name" "$cap" "$NCU" "${NCU_ARGS[@]}" -o "$R/$name" python3 scripts/gpu/profile_step.py --out /tmp/h28_ncu \
    --families gdn --rounds 0 --ncu-window "${XN[@]}" "$@"
  if [ -f "$R/$name.ncu-rep" ] || [ "${H28_SMOKE:-0}" = 1 ]; then
    timeout 40 "$NCU" -i "$R/$name.ncu-rep" --page details > "$R/${name}_details.txt" 2>&1
    timeout 40 "$NCU" -i "$R/$name.ncu-rep" --page raw --csv --print-units base > "$R/${name}_raw.csv" 2>&1
    timeout 20 python3 scripts/gpu/limits_summary.py "$R" > /dev/null 2>&1
    grep -E '^  [_a-z]|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Stall Long|Warp Cycles Per Issued' \
      "$R/${name}_details.txt" | head -n 120
    pack
  fi
}
ncu_part ncu_nvfp4_b256 70 --batch $B256 --specs nvfp4/fp16

# 3. torch.profiler at B = 1 (goal 3: kernel time vs the graph step time) and B = 64 aligned vs staggered (goal 5)
part prof_b1 45 "${PROF[@]}" --out "$R/prof_b1" --batch $B1 --specs fp32,fp8+sr
part prof_b64_stagger 50 "${PROF[@]}" --out "$R/prof_b64" --batch $B64 --specs nvfp4/fp16,fp32 --stagger --no-conventional

# 4. Nsight Compute: fp32 and fp8+sr at B = 256 (goals 2, 4), fp32 at B = 1 (goal 3, the fused kernel)
ncu_part ncu_fp32_fp8 80 --batch $B256,$B1 --specs fp32,fp8+sr

# 5. microbenchmarks: the batch-1 launch floor under CUDA graphs (goal 3); read ceilings of the read-copy byte
#    patterns with their decode, on the non-flush launch's tiles (goals 1, 2, 4)
part launch_floor 35 python3 scripts/gpu/launch_floor.py --out "$R/floor" --rep-ms 30 "${X[@]}"
part read_ceiling 50 python3 scripts/gpu/read_ceiling.py --out "$R/ceiling" --formats fp32,fp16,fp8,int8,nvfp4 \
  --no-fp32-sweep --rep-ms 25 "${X[@]}"

# 6. bench rows with the anchors and device checks in the same run: gdn fp32 at B = 1 / 256 with fla (goal 3's
#    comparison in one run), then kda (fla anchor) and mamba2 at B = 256 (correctness.csv is written first,
#    results.partial.csv as rows finish)
BENCH=(python3 scripts/gpu/bench.py "${XB[@]}")
part bench_gdn 90 "${BENCH[@]}" --out "$R/bench_gdn" --families gdn --specs fp32 --batches $B1,$B256
for fam in $FAMS_BENCH; do
  part bench_$fam 130 "${BENCH[@]}" --out "$R/bench_$fam" --families $fam --specs $SPECS --batches $B256
done

timeout 20 python3 scripts/gpu/limits_summary.py "$R" || true
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"
pack
ls -la "$OUT"
