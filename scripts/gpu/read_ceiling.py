"""Read-bandwidth ceiling of the non-flush access pattern (GPU): how fast can a kernel with the non-flush
launch's grid and tiles stream an fp32 state that it only reads?

A minimal Triton kernel (no ring, no slot indirection) reads ``[N, V, K]`` fp32 (N = batch x heads, one program
per (V-block, head)) in four key chunks, as ``_nonflush_kernel`` does, and stores ``S x`` per row; the same
with the slot index and ring count loaded first (the dependent loads a decode step starts with); and cuBLAS's
matrix-vector product over the same bytes. Prints GB/s and the fraction of the copy bandwidth measured in the
same run (``kernels.bench.copy_bandwidth``) and writes ``OUT/read_ceiling.csv`` / ``.md``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/read_ceiling.py --out "$OUT/ceiling"
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import Timer, copy_bandwidth  # noqa: E402
from replayssm_quant.kernels.bench_report import write_table  # noqa: E402


@triton.jit
def _rowdot_stream_kernel(S_ptr, x_ptr, idx_ptr, cnt_ptr, out_ptr, K: tl.constexpr, V: tl.constexpr,
                          BVA: tl.constexpr, KC: tl.constexpr, STAGES: tl.constexpr, CHAIN: tl.constexpr):
    """out[n, v] = sum_k S[n, v, k] x[k] over key chunks of KC; CHAIN: first load idx[n] and cnt[idx[n]] and
    stream only after them (as a decode step does)."""
    pv = tl.program_id(0)
    n = tl.program_id(1).to(tl.int64)
    offs_v = pv * BVA + tl.arange(0, BVA)
    offs_c = tl.arange(0, KC)
    if CHAIN:
        slot = tl.load(idx_ptr + n).to(tl.int64)
        h = tl.load(cnt_ptr + slot)
        base = S_ptr + slot * V * K
        run = h < 1000
    else:
        base = S_ptr + n * V * K
        run = True
    acc = tl.zeros([BVA], dtype=tl.float32)
    if run:
        for c in tl.range(0, K // KC, num_stages=STAGES):
            kc = c * KC + offs_c
            S = tl.load(base + offs_v[:, None] * K + kc[None, :])
            acc += tl.sum(S * tl.load(x_ptr + kc)[None, :], 1)
    tl.store(out_ptr + n * V + offs_v, acc)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--heads", type=int, default=256 * 32, help="N = batch x heads (default: gdn at batch 256)")
    p.add_argument("--rep-ms", type=int, default=50)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("read_ceiling: needs a CUDA device")
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    timer = Timer(dev, a.rep_ms)
    bw = copy_bandwidth(dev, timer, 2 ** 30)["best"]
    N, V, K = a.heads, 128, 128
    S = torch.randn(N, V, K, device=dev)
    x = torch.randn(K, device=dev)
    out = torch.empty(N, V, device=dev)
    idx = torch.randperm(N, device=dev).to(torch.int32)
    cnt = torch.zeros(N, dtype=torch.int32, device=dev)
    nbytes = S.numel() * 4
    rows = []

    def add(name, fn):
        ms = timer(fn)
        rows.append(dict(kernel=name, us=ms * 1e3, GBps=nbytes / (ms * 1e-3) / 1e9,
                         frac_copy_bw=nbytes / (ms * 1e-3) / 1e9 / bw))
        pd.DataFrame(rows).to_csv(os.path.join(a.out, "read_ceiling.csv"), index=False)

    Sm = S.view(N * V, K)
    add("cuBLAS S @ x", lambda: torch.mv(Sm, x, out=out.view(-1)))
    for bva, stages, warps, chain in [(128, 3, 2, False), (128, 3, 2, True), (128, 3, 4, False), (128, 4, 4, False),
                                      (64, 3, 2, False), (64, 3, 2, True), (64, 4, 2, False), (32, 3, 1, False),
                                      (32, 3, 2, True), (128, 1, 4, False), (64, 1, 2, False)]:
        def fn(bva=bva, stages=stages, warps=warps, chain=chain):
            _rowdot_stream_kernel[(V // bva, N)](S, x, idx, cnt, out, K=K, V=V, BVA=bva, KC=32, STAGES=stages,
                                                 CHAIN=chain, num_warps=warps)
        add(f"triton BVA={bva} stages={stages} warps={warps}{' idx->h chain' if chain else ''}", fn)
    print(write_table(a.out, "read_ceiling", f"Read-only streaming of {nbytes / 1e6:.0f} MB fp32 (copy bandwidth "
                      f"{bw:.0f} GB/s)", pd.DataFrame(rows), dev, floatfmt=".3g"))


if __name__ == "__main__":
    main()
