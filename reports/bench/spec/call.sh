#!/usr/bin/env bash
# Session 2026-12-02, device call 1 (issue 27): GPU tests of the speculative kernels, verify sweep, spec bench.
set -uo pipefail
source scripts/gpu/setup.sh
mkdir -p "$OUT/r"
git log -1 --format='%H %s' > "$OUT/r/commit.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$OUT/r/commit.txt" || true
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> "$OUT/r/commit.txt"
date -u +%FT%TZ > "$OUT/r/t0.txt"
( time timeout 120 python3 -m pytest -n 8 -q --tb=line -rf tests/kernels/test_spec_decode.py tests/kernels/test_verify_fast_decay.py ) \
  > "$OUT/r/gpu_tests_spec.txt" 2>&1
tail -5 "$OUT/r/gpu_tests_spec.txt"
date -u +%FT%TZ >> "$OUT/r/t0.txt"
( time timeout 200 python3 scripts/gpu/spec_bench.py --out "$OUT/r/sw" --sweep-verify --families mamba2,gdn,kda \
  --sweep-block-v 32,64,128 --sweep-split 1,2 --sweep-warps 4 --sweep-dots ieee,tf32x3 ) > "$OUT/r/sweep.log" 2>&1
tail -45 "$OUT/r/sweep.log"
date -u +%FT%TZ >> "$OUT/r/t0.txt"
( time timeout 230 python3 scripts/gpu/spec_bench.py --out "$OUT/r/sb" --batches 256,1,64,512 --budget-s 165 \
  --verify-config "$OUT/r/sw/verify_sweep.csv" ) > "$OUT/r/bench.log" 2>&1
grep -A30 "## Targets" "$OUT/r/sb/report.md" | head -40
date -u +%FT%TZ >> "$OUT/r/t0.txt"
tar czf "$OUT/call1.tgz" -C "$OUT" r
ls -la "$OUT"
