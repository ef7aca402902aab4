#!/bin/bash
# Session 2026-12-05c, device call s16a (issue 28). (1) The GPU decode tests again: in s15a every case with a lossy
# recurrence checkpoint failed at its second step, because the GPU-only loop that copies the reference's state into
# the Triton cache (2850d39) rebound the step counter `t` to a tensor ("q has shape (7, 4, 2, 48)"); fixed, and the
# loop forced on in the interpreter passes every bit-exact case. (2) The knob A/Bs queued since sessions 2026-12-04e
# and 2026-12-05, most promising first (the 2-warp flush lost in s15b although it had 15-25% fewer instructions):
# the head's corrections first in 64-row groups and the scratch's L2 hints (call_s12c.sh), then IEEE one-stage flush
# dots for the dual 8-bit SR specs (call_s11d.sh). (3) Two B = 1 readings of s15b's table, this tree against
# 0fff0c1's in one run: gdn's fp8+sr / int8+sr non-flush step 8% slower than s10c's (4.52 -> 4.82 us), and gdn
# nvfp4/fp8+sr's aligned step (8.02 us) far below the (15 non-flush + flush) / 16 = 9.88 us of its own split.
# Also at B = 1: mamba2's fused replay fp32 step, whose grid (512 programs) is capped at 128 registers and spills
# 176 bytes offline (`scripts/ptxas_report.py --fused --batch 1`), against uncapped (168 registers, no spills, but 3
# programs per SM: not all 512 resident at once).
#   mkdir -p .gpu/sr_old && git archive 0fff0c1 kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py \
#     | tar -x -C .gpu/sr_old
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=540 bash reports/bench/speed/call_s16a.sh", carry=["TREE.txt", ".whl", ".gpu/sr_old"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s16a}
source scripts/gpu/parts.sh s16a "${BUDGET_S:-540}"
part gpu_tests 120 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py -k "bit_exact_vs_torch \
or corrections or scratch_l2 or other_grid or nvfp4_flush_sub_block_items"
part gpu_tests_formats 70 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_quantize_rowscaled.py \
  tests/kernels/test_decode_rowscaled.py tests/kernels/test_rounding_triton.py
B1="--families gdn --specs fp8+sr,int8+sr,nvfp4/fp8+sr --batch 1 --phases step,staggered,nonflush,flush --rep-ms 10"
part b1_new 40 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $B1 --stem b1_new
part b1_old 40 bash -c "cd .gpu/sr_old && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $B1 --stem b1_old_0fff0c1"
part b1_m2_cap 30 python3 scripts/gpu/launch_sweep.py --out "$R/b1" --families mamba2 --specs fp32 --batch 1 \
  --phases step,nonflush,flush --rep-ms 10 --stem b1_mamba2_fp32_cap --variants "default;maxnreg=0"
C64="flush_corrections_rows=64"
part bits 60 python3 scripts/gpu/knob_identity_check.py --families gdn,kda --specs nvfp4/fp16,nvfp4/fp8+sr \
  --batch 256 --steps 20 --variants "default;$C64;flush_scratch_l2=true"
part corr_b256 90 python3 scripts/gpu/launch_sweep.py --out "$R/corrections" --families gdn,kda \
  --specs nvfp4/fp16,nvfp4/fp8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_corrections_rows \
  --variants "default;$C64,flush_programs_per_sm=3;flush_scratch_l2=true"
V="default;flush_dot=ieee,flush_stages=1;flush_dot=ieee"
part dual_b256 80 python3 scripts/gpu/launch_sweep.py --out "$R/dual_dots" --families gdn,kda \
  --specs nvfp4/fp8+sr,nvfp4/int8+sr --batch 256 --phases step,flush --rep-ms 10 --stem b256_dual_dots --variants "$V"
part dual_b64 60 python3 scripts/gpu/launch_sweep.py --out "$R/dual_dots" --families gdn,kda \
  --specs nvfp4/fp8+sr,nvfp4/fp16 --batch 64 --phases step,staggered --rep-ms 10 --stem b64_dual_dots \
  --variants "default;flush_dot=ieee,flush_stages=1"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
