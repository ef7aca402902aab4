#!/bin/bash
# Session 2026-12-06g, device call s24a (issue 28). Shared keys: the ring keeps one key per key head where the
# model's value heads share keys (SSMStateCache num_key_heads; gdn: 16 key heads for 32 value heads, mamba2: 8
# groups for 128 heads), not a copy per value head. First the bit identity on the GPU (knob_identity_check
# --shared-keys: shared keys against a key per value head fed the repeated keys, graphed, staggered, B = 64; B = 1
# last), then the same-run A/B (launch_sweep --keys shared,per-head, each configuration timed both ways in turn): B = 256
# all five table specs, then B = 64, gdn and mamba2 (kda has a key per head).
#   git rev-parse --short HEAD > TREE.txt
#   run(command="BUDGET_S=470 bash reports/bench/speed/call_s24a.sh", carry=["TREE.txt"])
# A short budget: IDENT_SPECS, B256_FAMS, B256_SPECS narrow the first two parts (e.g. IDENT_SPECS=nvfp4/fp16
# B256_FAMS=mamba2,gdn B256_SPECS=nvfp4/fp16,fp32: the rows the shared keys move most first); AB_FIRST=1 runs the
# B = 256 A/B before the identity check (the interpreter tests already show the identity bit for bit on the CPU).
set -u
source scripts/gpu/setup.sh
R=${R:-$PWD/.gpu/res_s24a}
source scripts/gpu/parts.sh s24a "${BUDGET_S:-470}"
ident_b64() { part ident_b64 100 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 \
  --specs "${IDENT_SPECS:-fp32,nvfp4/fp16,fp8+sr}" \
  --variants default --batch 64 --steps 40 --shared-keys; }
keys_b256() { part keys_b256 230 python3 scripts/gpu/launch_sweep.py --out "$R/keys" --families "${B256_FAMS:-gdn,mamba2}" \
  --specs "${B256_SPECS:-fp32,nvfp4/fp16,fp8+sr,int8+sr,nvfp4/fp8+sr}" --batch 256 --phases step,staggered,nonflush,flush \
  --rep-ms 10 --stem b256_keys --keys shared,per-head; }
if [ "${AB_FIRST:-0}" = 1 ]; then keys_b256; ident_b64; else ident_b64; keys_b256; fi
part keys_b64 90 python3 scripts/gpu/launch_sweep.py --out "$R/keys" --families gdn,mamba2 \
  --specs fp32,nvfp4/fp16,fp8+sr --batch 64 --phases step,staggered --rep-ms 10 --stem b64_keys --keys shared,per-head
part ident_b1 50 python3 scripts/gpu/knob_identity_check.py --families gdn,mamba2 --specs fp32,nvfp4/fp16 \
  --variants default --batch 1 --steps 20 --shared-keys
echo "total wall $(( $(date +%s) - T0 ))s"; cat "$R/parts.tsv"; pack; ls -la "$OUT"
