#!/bin/bash
# Session 2026-12-06d, device call s20c (issue 28), then s20d (the same script: the bench part resumes). s20b ran the
# new GPU tests on 1fe21c4, whose fused nvfp4 kernel with one flush sub-block did not compile (its two-pass branch,
# compiled though never taken, asserted a scratch that launch had not allocated; fixed, with an offline sm_90a
# compile test), and the definition test on the tree before could not start (its archive lacked eval/, which the
# suite's conftest imports). (1) The definition test (the read copy = nvfp4_quantize of the committed fp32 checkpoint
# after every flush) on 4a49345, the tree whose fused head program rebuilt S_L in pass 2 (--noconftest); (2) the
# GPU's nvfp4 / fused decode tests on this tree; (3) the whole bench table on the current kernels, resumed by the
# next call if this one's time runs out (results replace bench_h100/ or bench_h200/, by the card).
#   mkdir -p .gpu/t_4a49345 && git archive 4a49345 kernels quant replayssm_quant scripts tests pyproject.toml \
#     eval/__init__.py | tar -x -C .gpu/t_4a49345
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=590 bash reports/bench/speed/call_s20c.sh", carry=["TREE.txt", ".whl", ".gpu/t_4a49345"])
#   s20d: run(command="NAME=s20d BUDGET_S=590 bash reports/bench/speed/call_s20c.sh", carry=["TREE.txt", ".whl",
#     ".gpu/res_s20c"])   (.gpu/res_s20c: s20c's results unpacked, so that the bench resumes on a fresh machine too)
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s20c}
NAME=${NAME:-s20c}
source scripts/gpu/parts.sh "$NAME" "${BUDGET_S:-590}"
OLD=.gpu/t_4a49345
if [ "$NAME" = s20c ]; then
  part def_old 60 bash -c "cd $OLD && python3 -m pytest --noconftest -q -rf -p no:cacheprovider tests/kernels/test_decode.py -k encodes_the_committed"
  part gpu_tests 150 python3 -m pytest -q -n 4 -rf -p no:cacheprovider tests/kernels/test_decode.py \
    -k "nvfp4 or committed or fused"
fi
part bench_$NAME 575 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families mamba2,gdn,kda \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
