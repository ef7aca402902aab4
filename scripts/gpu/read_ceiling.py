"""Read-bandwidth ceiling of the non-flush access pattern (GPU): how fast can a kernel with the non-flush
launch's grid and tiles stream an fp32 state that it only reads?

A minimal Triton kernel (no ring, no slot indirection) reads ``[N, V, K]`` fp32 (N = batch x heads, one program
per (V-block, head)) in four key chunks, as ``_nonflush_kernel`` does, and stores ``S x`` per row; the same
with the slot index and ring count loaded first (the dependent loads a decode step starts with); and cuBLAS's
matrix-vector product over the same bytes. ``--formats``: the same read of a state stored in a compressed read
format, decoded as ``_nonflush_kernel`` decodes it (``kernels.tiles._load_read``: fp16 bits, row-scaled fp8 / int8
codes' values summed per row then times the row's scale, nvfp4 codes, block scales and the E2M1 raw values summed
per 16-element block), with the non-flush launch's tiles (all V rows, 32-key chunks, 2 warps, 3 stages) and a
few others; the bytes are the stored format's (codes and scales). Prints GB/s and the fraction of the copy bandwidth measured in the same run
(``kernels.bench.copy_bandwidth``) and writes ``OUT/read_ceiling.csv`` / ``.md``. Each format's state is at least
4x the L2 (more heads than ``--heads`` where needed).

    source scripts/gpu/setup.sh && python3 scripts/gpu/read_ceiling.py --out "$OUT/ceiling" \
        [--formats fp32,fp16,fp8,int8,nvfp4] [--no-fp32-sweep]

``--cpu-smoke`` (with ``TRITON_INTERPRET=1``): tiny shapes in the interpreter, each format kernel's output checked
against the decoded state (a check that the script runs, not a measurement).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import pandas as pd
import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import Timer, copy_bandwidth  # noqa: E402
from replayssm_quant.kernels.bench_report import L2_BYTES, write_table  # noqa: E402
from replayssm_quant.kernels.launch import launch_options  # noqa: E402
from replayssm_quant.kernels.storage import StoredState  # noqa: E402
from replayssm_quant.kernels.tiles import _load_read  # noqa: E402
from replayssm_quant.quant import format_codes as fcode  # noqa: E402
from replayssm_quant.quant.formats import get_format  # noqa: E402


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


@triton.jit
def _read_format_kernel(p0, p1, p2, x_ptr, out_ptr, K: tl.constexpr, V: tl.constexpr, BVA: tl.constexpr,
                        KC: tl.constexpr, STAGES: tl.constexpr, FMT: tl.constexpr):
    """out[n, v] = sum_k S[n, v, k] x[k] for a state stored in format FMT (``p0, p1, p2`` = ``StoredState``'s
    ``kernel_tensors()``), each key chunk of KC decoded by ``tiles._load_read`` as the non-flush read decodes it
    (nvfp4: E2M1 raw values times x summed per 16-element block, times the block scales, then ``/ s_enc`` and the
    raw values' 2**6; row-scaled fp8 / int8: the codes' values times x, each row's sum times its scale d; other
    formats: the decoded values)."""
    pv = tl.program_id(0)
    n = tl.program_id(1).to(tl.int64)
    offs_v = pv * BVA + tl.arange(0, BVA)
    offs_c = tl.arange(0, KC)
    mv = offs_v < V
    acc = tl.zeros([BVA], dtype=tl.float32)
    for c in tl.range(0, K // KC, num_stages=STAGES):
        kc = c * KC + offs_c
        S, SB = _load_read(p0, p1, p2, n, offs_v, kc, mv, kc < K, K, V, FMT, KC, c * KC)
        xc = tl.load(x_ptr + kc)
        if FMT == fcode.NVFP4:
            blk = tl.sum(tl.reshape(S * xc[None, :], (BVA, KC // 16, 16)), 2)
            acc += tl.sum(blk * SB, 1)
        else:
            acc += tl.sum(S * xc[None, :], 1)
    if FMT == fcode.NVFP4:
        acc = acc / tl.load(p2 + n) * 64.0   # the raw values carry 2**-6 (rounding.nvfp4_raw)
    elif FMT == fcode.FP8 or FMT == fcode.INT8:
        acc = acc * SB                       # the rows' decode scales (the same for every chunk)
    tl.store(out_ptr + n * V + offs_v, acc)


#: (BVA, stages, warps) of the format reads: the non-flush launch's (all rows, 3 stages, 2 warps), then others
FORMAT_CONFIGS = ((128, 3, 2), (128, 1, 4), (32, 3, 2))


#: the read formats ``--formats`` takes (:func:`format_state` fills each with valid codes)
READ_FORMATS = ("fp32", "fp16", "bf16", "fp8", "int8", "nvfp4")


def format_state(name, N, V, K, device, gen):
    """A ``StoredState`` of ``N`` (slot, head) states in format ``name`` filled with random valid codes (no NaN
    codes; nvfp4 block scales 2**-2 .. 2**1, s_enc 1) and its bytes."""
    st = StoredState(get_format(name), N, 1, V, K, device)
    if name == "fp32":
        st.data.copy_(torch.randn(st.data.shape, generator=gen, device=device))
    elif name == "nvfp4":
        st.data.copy_(torch.randint(0, 256, st.data.shape, generator=gen, device=device).to(torch.uint8))
        st.scales.copy_(torch.randint(0x28, 0x40, st.scales.shape, generator=gen, device=device).to(torch.uint8))
    elif name in ("fp8", "int8"):
        lo, hi = (0, 0x7F) if name == "fp8" else (-127, 128)
        st.data.copy_(torch.randint(lo, hi, st.data.shape, generator=gen, device=device).to(st.data.dtype))
        st.scales.copy_(torch.rand(st.scales.shape, generator=gen, device=device) + 0.5)
    else:   # 16-bit bits
        vals = torch.randn(st.data.shape, generator=gen, device=device).to(getattr(torch, {"fp16": "float16",
                                                                                          "bf16": "bfloat16"}[name]))
        st.data.copy_(vals.view(st.data.dtype))
    return st, st.bytes_per_slot() * N


def format_read(st, x, out, bva, stages, warps, maxnreg=None):
    """Launch :func:`_read_format_kernel` over every state of ``st`` (grid ``(V / BVA, N)``)."""
    p0, p1, p2 = st.kernel_tensors()
    N, V, K = st.data.shape[0], st.V, st.K
    kw = launch_options(st.data.device, warps, maxnreg)
    _read_format_kernel[(V // bva, N)](p0, p1, p2, x, out, K=K, V=V, BVA=bva, KC=32, STAGES=stages,
                                       FMT=fcode.FORMAT_CODE[st.fmt.name], **kw)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--heads", type=int, default=256 * 32, help="N = batch x heads (default: gdn at batch 256)")
    p.add_argument("--rep-ms", type=int, default=50)
    p.add_argument("--formats", default="", help="read formats to time besides the fp32 sweep (comma list of "
                   f"{', '.join(READ_FORMATS)}; default none, --cpu-smoke all)")
    p.add_argument("--no-fp32-sweep", action="store_true", help="skip the fp32 kernel / cuBLAS sweep")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes in the Triton interpreter (TRITON_INTERPRET=1)")
    a = p.parse_args(argv)
    formats = [f for f in a.formats.split(",") if f] or (list(READ_FORMATS) if a.cpu_smoke else [])
    for f in formats:
        if f not in READ_FORMATS:
            p.error(f"--formats: {f!r} is not a read format this script times; allowed {', '.join(READ_FORMATS)}")
    if a.cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("read_ceiling: --cpu-smoke needs TRITON_INTERPRET=1")
        dev = torch.device("cpu")
    elif not torch.cuda.is_available():
        sys.exit("read_ceiling: needs a CUDA device")
    else:
        dev = torch.device("cuda")
    os.makedirs(a.out, exist_ok=True)
    timer = Timer(dev, a.rep_ms)
    bw = copy_bandwidth(dev, timer, 2 ** 30 if dev.type == "cuda" else 2 ** 20)["best"]
    rows = []

    def save():
        pd.DataFrame(rows).to_csv(os.path.join(a.out, "read_ceiling.csv"), index=False)

    V, K = 128, 128
    for name in formats:
        gen = torch.Generator(device=dev).manual_seed(5)
        per_head = StoredState(get_format(name), 1, 1, V, K, "meta").bytes_per_slot()
        N = 4 if a.cpu_smoke else max(a.heads, math.ceil(4 * L2_BYTES / per_head))
        st, nb = format_state(name, N, V, K, dev, gen)
        x = torch.randn(K, device=dev, generator=gen)
        out = torch.empty(N, V, device=dev)
        for bva, stages, warps in (FORMAT_CONFIGS[:1] if a.cpu_smoke else FORMAT_CONFIGS):
            for maxnreg in ((None,) if a.cpu_smoke or (bva, stages, warps) != FORMAT_CONFIGS[0] else (None, 128)):
                def fn(bva=bva, stages=stages, warps=warps, maxnreg=maxnreg, st=st, x=x, out=out):
                    format_read(st, x, out, bva, stages, warps, maxnreg)
                ms = timer(fn)
                if a.cpu_smoke:   # the decode is the storage's: out = decode(S) x
                    ref = st.decode(torch.arange(N)).view(N, V, K) @ x
                    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
                rows.append(dict(kernel=f"{name} read BVA={bva} stages={stages} warps={warps}"
                                 + (f" maxnreg={maxnreg}" if maxnreg else ""), MB=nb / 1e6, us=ms * 1e3,
                                 GBps=nb / (ms * 1e-3) / 1e9, frac_copy_bw=nb / (ms * 1e-3) / 1e9 / bw))
                save()
        del st, out
    if a.no_fp32_sweep or a.cpu_smoke:
        print(write_table(a.out, "read_ceiling", f"Read-only streaming of states in {', '.join(formats)} (copy "
                          f"bandwidth {bw:.0f} GB/s)", pd.DataFrame(rows), dev, floatfmt=".3g"))
        return
    N = a.heads
    S = torch.randn(N, V, K, device=dev)
    x = torch.randn(K, device=dev)
    out = torch.empty(N, V, device=dev)
    idx = torch.randperm(N, device=dev).to(torch.int32)
    cnt = torch.zeros(N, dtype=torch.int32, device=dev)
    nbytes = S.numel() * 4

    def add(name, fn):
        ms = timer(fn)
        rows.append(dict(kernel=name, MB=nbytes / 1e6, us=ms * 1e3, GBps=nbytes / (ms * 1e-3) / 1e9,
                         frac_copy_bw=nbytes / (ms * 1e-3) / 1e9 / bw))
        save()

    Sm = S.view(N * V, K)
    add("cuBLAS S @ x", lambda: torch.mv(Sm, x, out=out.view(-1)))
    for bva, stages, warps, chain in [(128, 3, 2, False), (128, 3, 2, True), (128, 3, 4, False), (128, 4, 4, False),
                                      (64, 3, 2, False), (64, 3, 2, True), (64, 4, 2, False), (32, 3, 1, False),
                                      (32, 3, 2, True), (128, 1, 4, False), (64, 1, 2, False)]:
        def fn(bva=bva, stages=stages, warps=warps, chain=chain):
            _rowdot_stream_kernel[(V // bva, N)](S, x, idx, cnt, out, K=K, V=V, BVA=bva, KC=32, STAGES=stages,
                                                 CHAIN=chain, num_warps=warps)
        add(f"triton BVA={bva} stages={stages} warps={warps}{' idx->h chain' if chain else ''}", fn)
    print(write_table(a.out, "read_ceiling", f"Read-only streaming of {nbytes / 1e6:.0f} MB fp32"
                      + (f" and of states in {', '.join(formats)}" if formats else "")
                      + f" (copy bandwidth {bw:.0f} GB/s)", pd.DataFrame(rows), dev, floatfmt=".3g"))


if __name__ == "__main__":
    main()
