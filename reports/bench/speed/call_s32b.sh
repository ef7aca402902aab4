#!/bin/bash
# Session 2026-12-07g, device call s32b (issue 28, goal 3): batch-1 replay in 8-row programs of one warp, as fla's
# batch-1 kernels (no cross-warp reductions in the step's chain), flushing in pairs of programs (the flush's tl.dot
# needs 16-row sub-blocks): kernels/fused.py, the launcher's new batch-1 default for gdn and mamba2 (kernels/launch.py).
# 1. The GPU's bit-exactness tests of the fused replay step with programs of fewer rows than the flush sub-block.
# 2. A knob sweep at batch 1 (fp32, nvfp4/fp16, fp8+sr; every family): the new default against the old one
#    (block_v=16,num_warps=4: gdn's and mamba2's default before; kda keeps 32-row programs) and 8-row one-warp kda,
#    twice interleaved (batch 1 moves by ~0.4 us from reading to reading).
# 3. The table's batch-1 column on this tree (all specs, fla and mamba_ssm anchors, the device checks): goal 3.
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=560 bash reports/bench/speed/call_s32b.sh", carry=["TREE.txt", ".whl"], kind="nvidia-h200")
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s32b}
source scripts/gpu/parts.sh s32b "${BUDGET_S:-560}"
part gpu_tests 150 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
  -k "groups or replay-8 or spread"
part b1_sweep 230 python3 scripts/gpu/launch_sweep.py --out "$R/b1_sweep" --families gdn,kda,mamba2 \
  --specs fp32,nvfp4/fp16,fp8+sr --batch 1 --phases step,nonflush,flush --rep-ms 20 --stem b1_block_v8_one_warp \
  --variants "default;block_v=16,num_warps=4;block_v=8,num_warps=1;default;block_v=16,num_warps=4"
part bench_b1 160 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench_b1" --resume --families gdn,kda,mamba2 \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 1
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
