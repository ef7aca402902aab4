#!/bin/bash
# Session 2026-12-02b, device call A (issue 28): the whole bench table in one run (3 families x 5 specs x
# B = 256, 1, 64, 512, aligned + staggered, fla and the mamba_ssm anchor, device checks), then torch.profiler
# splits of mamba2 / kda at B = 256. Resumable: a second call with the same R continues the bench.
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s6a}
source scripts/gpu/parts.sh s6a "${BUDGET_S:-545}"
if [ -f .whl/mamba_ssm-2.3.2.post1.tar.gz ]; then
  mkdir -p /tmp/mssm && tar xzf .whl/mamba_ssm-2.3.2.post1.tar.gz -C /tmp/mssm
  export REPLAYSSM_MAMBA_SSM_SRC=/tmp/mssm/mamba_ssm-2.3.2.post1
fi
python3 -c "import einops, fla; print('fla', fla.__version__, 'einops', einops.__version__)" || echo "fla not importable"
part bench 470 python3 scripts/gpu/bench.py --rep-ms 10 --out "$R/bench" --resume --families gdn,mamba2,kda \
  --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --batches 256,1,64,512
part prof_m2_kda 70 python3 scripts/gpu/profile_step.py --families mamba2,kda --rounds 2 --out "$R/prof_b256" \
  --batch 256 --specs fp32,nvfp4/fp16
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
