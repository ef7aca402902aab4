"""GPU check and timing of the grouped-query SDPA of a decode session's windows (eval/attention.py).

One attention layer of the Qwen3.5-4B shape (16 query / 4 KV heads of 256, bf16) as a chunked window calls it:
``T`` new queries over ``S`` keys with a causal mask. For each (rows, S): transformers' ``sdpa`` attention
(``repeat_kv`` of keys and values, then SDPA with the mask) against :func:`grouped_sdpa_attention` (no copy):
max abs difference of the outputs (both bf16) and the ``triton.testing.do_bench`` median of each. Prints a table
and writes ``OUT/attention_check.md`` / ``.csv`` (with :func:`~replayssm_quant.kernels.bench_report.run_header`).

    source scripts/gpu/setup.sh && python3 scripts/gpu/attention_check.py --out "$OUT"
"""

from __future__ import annotations

import argparse
import os

import pandas as pd
import torch
import triton
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from replayssm_quant.eval.attention import grouped_sdpa_attention
from replayssm_quant.kernels.bench_report import write_table


class _Attn(torch.nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="80,160")
    ap.add_argument("--keys", default="1040,8192,17408")
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    H, Hkv, D, T = 16, 4, 256, args.tokens
    m = _Attn(H // Hkv)
    rows = []
    for B in map(int, args.rows.split(",")):
        for S in map(int, args.keys.split(",")):
            g = torch.Generator(device="cuda").manual_seed(B + S)
            q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
            k, v = (torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in "kv")
            mask = (torch.arange(T, device="cuda")[:, None] + (S - T) >= torch.arange(S, device="cuda")[None, :])
            mask = mask[None, None].expand(B, 1, T, S).contiguous()
            ref, _ = sdpa_attention_forward(m, q, k, v, mask, scaling=D ** -0.5)
            got, _ = grouped_sdpa_attention(m, q, k, v, mask, scaling=D ** -0.5)
            diff = float((got.float() - ref.float()).abs().max())
            del ref, got
            t_ref = triton.testing.do_bench(lambda: sdpa_attention_forward(m, q, k, v, mask, scaling=D ** -0.5),
                                            warmup=5, rep=60)
            t_grp = triton.testing.do_bench(lambda: grouped_sdpa_attention(m, q, k, v, mask, scaling=D ** -0.5),
                                            warmup=5, rep=60)
            kv_gb = 2 * B * Hkv * S * D * 2 / 1e9
            rows.append(dict(rows=B, keys=S, queries=T, kv_gb=kv_gb, max_abs_diff=diff, sdpa_repeat_kv_ms=t_ref,
                             grouped_ms=t_grp, speedup=t_ref / t_grp, grouped_kv_gb_per_s=kv_gb / t_grp * 1e3))
            print(rows[-1], flush=True)
            del q, k, v, mask
            torch.cuda.empty_cache()
    title = (f"Grouped-query SDPA of a chunked window vs transformers' sdpa (repeat_kv): one attention layer of the "
             f"Qwen3.5-4B shape ({H} query / {Hkv} KV heads of {D}, bf16), {T} queries over S keys, causal bool mask "
             "[rows, 1, T, S]; times: do_bench medians; kv_gb: the layer's KV cache bytes")
    print(write_table(args.out, "attention_check", title, pd.DataFrame(rows), torch.device("cuda"), floatfmt=".4g"),
          flush=True)

if __name__ == "__main__":
    main()
