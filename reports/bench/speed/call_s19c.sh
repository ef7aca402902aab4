#!/bin/bash
# Session 2026-12-06c, device call s19c (issue 28, goal 3: batch 1, gdn replay fp32 1.46x fla, target 1.3x). The
# fused step's arrival count is now added by lane 0 of a one-lane-per-thread tensor (kernels/fused.py `_arrive`)
# instead of as a scalar: Triton handed a scalar atomic's reply to every thread through shared memory right at the
# atomic (SHFL, STS, BAR.SYNC, LDS), so every program waited one atomic round trip mid-program; now the reply stays
# in one register until the program's end, where `_advance_if_last` reduces it (offline SASS: no use of the reply
# between the mid-program ATOMG and the end; `sass/b1_fused_arrive_reply.csv`).
# (1) bits and counters: knob_identity_check, step_advance=false (the second launch) against true, B = 1 replay and
#     B = 4 conventional; the GPU decode tests of the advance and the stale ring;
# (2) B = 1 step, this tree against de818dd (the tree before: kernels as b053e03) in one run, twice interleaved,
#     replay fp32 and fp8+sr, all families; conventional fp32 once each.
#   mkdir -p .gpu/t_de818dd && git archive de818dd kernels quant replayssm_quant scripts pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_de818dd
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=245 bash reports/bench/speed/call_s19c.sh", carry=["TREE.txt", ".gpu/t_de818dd"])
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s19c}
source scripts/gpu/parts.sh s19c "${BUDGET_S:-245}"
ADV="step_advance=false;step_advance=true"
OLD=.gpu/t_de818dd
part bits_b1 45 python3 scripts/gpu/knob_identity_check.py --families gdn,kda,mamba2 --specs fp32,fp8+sr,nvfp4/fp16 \
  --batch 1 --steps 40 --variants "$ADV"
part bits_conv 15 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs fp32,fp8+sr --batch 4 \
  --steps 20 --mode conventional --variants "$ADV"
part gpu_tests 40 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py -k "advance or stale"
B1="--families gdn,kda,mamba2 --specs fp32,fp8+sr --batch 1 --phases step --rep-ms 10"
C1="--families gdn,kda,mamba2 --specs fp32 --batch 1 --mode conventional --phases step --rep-ms 10"
part b1_new 25 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $B1 --stem b1_new
part b1_old 25 bash -c "cd $OLD && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $B1 --stem b1_old_de818dd"
part b1_new_again 15 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $B1 --stem b1_new_again
part b1_old_again 15 bash -c "cd $OLD && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $B1 --stem b1_old_de818dd_again"
part b1_conv_new 15 python3 scripts/gpu/launch_sweep.py --out "$R/b1" $C1 --stem b1_conv_new
part b1_conv_old 15 bash -c "cd $OLD && python3 scripts/gpu/launch_sweep.py --out '$R/b1' $C1 --stem b1_conv_old_de818dd"
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
