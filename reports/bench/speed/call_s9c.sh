#!/bin/bash
# Session 2026-12-04b, device call C (issue 28), right after call B on the same (warm) machine: the rest of the
# bench table (mamba2, resumed from call B's results.partial.csv, which is carried in .gpu/res_s9b), then the GPU
# decode tests without -x, then torch.profiler kernel splits at batch 1 (one launch per fused step now).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s9b}
source scripts/gpu/parts.sh s9c "${BUDGET_S:-480}"
part bench_rest 330 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
part prof_b1 45 python3 scripts/gpu/profile_step.py --families gdn,kda,mamba2 --rounds 2 --out "$R/prof_b1" \
  --batch 1 --specs fp32
part gpu_tests 90 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_bench_checks.py \
  tests/kernels/test_decode.py -k "advances_counters or fp32_replay_equals_oracle or conventional_fp32 or padded or split_flush_bit_identical or bench_checks"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
