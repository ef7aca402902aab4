# Nsight Compute for the device-call scripts: `source scripts/gpu/ncu.sh` after scripts/gpu/parts.sh (it uses $R
# and `pack`). Sets NCU (the ncu binary, empty when the machine has none) and NCU_SECTIONS (the sections and metrics
# every limits reading takes: speed of light, memory, occupancy, launch, warp states, schedulers, compute, DRAM
# bytes and duration), and defines `ncu_export NAME`: $R/NAME.ncu-rep's details page and raw CSV
# (scripts/gpu/limits_summary.py reads $R/*_raw.csv), then `pack`.
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
echo "ncu: ${NCU:-none}"; [ -n "$NCU" ] && "$NCU" --version | tail -n 1
NCU_SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
              --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
              --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum)
ncu_export() {
  [ -f "$R/$1.ncu-rep" ] || return 0
  timeout 40 "$NCU" -i "$R/$1.ncu-rep" --page details > "$R/$1_details.txt" 2>&1
  timeout 40 "$NCU" -i "$R/$1.ncu-rep" --page raw --csv --print-units base > "$R/$1_raw.csv" 2>&1
  pack
}
