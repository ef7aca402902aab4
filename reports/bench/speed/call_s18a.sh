#!/bin/bash
# Session 2026-12-06b, device call s18a (issue 28, goal 3: batch 1, replay fp32 <= 1.3x the best conventional
# kernel; gdn missed by 0.86 us in s15). The fused step advances its rows' counters itself (step_advance, on grids
# of <= 8 programs per SM): until this tree every program ended with a block barrier, an acquire-release arrival
# atomic (whose release waits for the program's output and ring stores) and, in the last program of a row, a reload
# of the counters before storing them, all on the kernel's tail (the profiler's +0.9 us of kernel time, s9c). Now
# (kernels/fused.py `_arrive`, `_advance_if_last`) a program reads both counters at its start, counts in with a
# release atomic mid-program (after its loads are issued; no reply awaited), and only the last program of a row
# waits, for an acquire exchange that resets the count, then stores the counters it read, advanced.
# (1) the bits and counters: knob_identity_check of step_advance=false (the second launch) against true, B = 1, 4
#     and 64 (forced: every program of a row on another SM), replay and conventional; GPU decode tests;
# (2) B = 1, step, this tree against 6065e45 (the tree before) in one run, twice interleaved: replay fp32, fp8+sr,
#     nvfp4/fp16 and conventional fp32, all families;
# (3) on this tree: step_advance=false against the default at B = 1, and step_advance=true against the default
#     (false) at B = 256 conventional fp32 (there the old arrival cost +5%: docs/TUNING.md);
# (4) the bench's batch-1 rows with fla and mamba_ssm in the same run (goal 3's ratio).
#   mkdir -p .gpu/t_6065e45 && git archive 6065e45 kernels quant replayssm_quant scripts pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_6065e45
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=540 bash reports/bench/speed/call_s18a.sh", carry=["TREE.txt", ".whl", ".gpu/t_6065e45"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s18a}
source scripts/gpu/parts.sh s18a "${BUDGET_S:-540}"
ADV="step_advance=false;step_advance=true"
part bits_b1 50 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 --specs fp32,fp8+sr,nvfp4/fp16 \
  --batch 1 --steps 40 --variants "$ADV"
part bits_b64 60 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs fp32,nvfp4/fp16 \
  --batch 64 --steps 40 --variants "$ADV"
part bits_conv 40 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs fp32,fp8+sr --batch 4 \
  --steps 20 --mode conventional --variants "$ADV"
part gpu_tests 90 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
  -k "advance or bit_exact_vs_torch or stale"
B1="--families gdn,kda,mamba2 --specs fp32,fp8+sr,nvfp4/fp16 --batch 1 --phases step --rep-ms 10"
C1="--families gdn,kda,mamba2 --specs fp32 --batch 1 --mode conventional --phases step --rep-ms 10"
part b1_new 40 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $B1 --stem b1_new --variants "default;step_advance=false"
part b1_old 30 bash -c "cd .gpu/t_6065e45 && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $B1 --stem b1_old_6065e45"
part b1_conv_new 20 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $C1 --stem b1_conv_new
part b1_conv_old 20 bash -c "cd .gpu/t_6065e45 && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $C1 --stem b1_conv_old_6065e45"
part b1_new_again 30 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $B1 --stem b1_new_again
part b1_old_again 30 bash -c "cd .gpu/t_6065e45 && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $B1 --stem b1_old_6065e45_again"
part b256_conv 40 python3 scripts/gpu/launch_sweep.py --out "$R/b256" --families gdn,kda --specs fp32 --batch 256 \
  --mode conventional --phases step --rep-ms 10 --stem b256_conv_advance --variants "default;step_advance=true"
part bench_b1 70 python3 scripts/gpu/bench.py --out "$R/bench_b1" --families gdn,kda,mamba2 --specs fp32 --batches 1 \
  --rep-ms 20
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
