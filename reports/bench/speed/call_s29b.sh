#!/bin/bash
# Session 2026-12-07d, device call s29b (issue 28). On an H200: call_s19a.sh with only the goal rows (BATCHES=256;
# the goals' card). On any other card: mamba2's nvfp4 read decode again, now that the shared keys have taken the
# ring's bytes off its non-flush step. Nsight Compute (s28b, H100) puts mamba2 nvfp4/fp16's non-flush launch at 75%
# issue and 62.5% of DRAM peak: the integer E2M1 decode's instructions, not the bytes, now set it. The PTX decode
# (fewer instructions, `nonflush_e2m1_ptx`) lost on mamba2 in s15a with a key per value head (154.6 us integer,
# 183.5 PTX, 158.7 PTX capped at 96 registers: ptxas unrolls the staged loop whole at 104 registers). Same-call A/B
# at B = 256 and 64 (launch_sweep, the variants in turn; the decodes give the same bits, tests/kernels).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=300 bash reports/bench/speed/call_s29b.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BATCHES=${BATCHES:-256} exec bash reports/bench/speed/call_s19a.sh
fi
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s29b}
source scripts/gpu/parts.sh s29b "${BUDGET_S:-300}"
DEC="default;nonflush_e2m1_ptx=true;nonflush_e2m1_ptx=true,nonflush_maxnreg=96;nonflush_e2m1_ptx=true,nonflush_maxnreg=80"
part dec_bits 60 python3 scripts/gpu/knob_identity_check.py --families mamba2 --specs nvfp4/fp16 --batch 64 \
  --steps 20 --variants "$DEC"
for B in 256 64; do
  part dec_b$B 100 python3 scripts/gpu/launch_sweep.py --out "$R/decode" --families mamba2 \
    --specs nvfp4/fp16,nvfp4/fp8+sr --batch $B --phases step,nonflush --rep-ms 10 --stem b${B}_mamba2_decode \
    --variants "$DEC"
done
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
