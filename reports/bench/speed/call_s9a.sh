#!/bin/bash
# Session 2026-12-04b, device call A (issue 28): the fused step that advances its own counters (one launch instead
# of two) checked on the GPU (kernel tests, the bench's device checks at the real shapes), then two knob sweeps:
# batch 1 replay fp32 tiles (goal 3) and batch 64 staggered dual nvfp4 flush items (goal 1b).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s9a}
export TRITON_CACHE_DIR=$PWD/.gpu/triton_cache   # kept on a warm machine for the next call
source scripts/gpu/parts.sh s9a "${BUDGET_S:-330}"
part gpu_tests 120 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_bench_checks.py \
  tests/kernels/test_decode.py -k "advances_counters or fp32_replay_equals_oracle or conventional_fp32 or padded or split_flush_bit_identical or bench_checks"
part sweep_b1 100 python3 scripts/gpu/launch_sweep.py --out "$R/sweep_b1" --families gdn,mamba2,kda --specs fp32 \
  --batch 1 --phases step --rep-ms 30 --stem b1_replay_fp32 \
  --variants "default;num_warps=1;num_warps=2;num_warps=8;block_v=32;block_v=32,num_warps=8"
part sweep_b64 90 python3 scripts/gpu/launch_sweep.py --out "$R/sweep_b64" --families gdn,kda --specs nvfp4/fp16 \
  --batch 64 --phases step,staggered --rep-ms 10 --stem b64_nvfp4_items \
  --variants "default;flush_nvfp4_items=false"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
