#!/usr/bin/env python3
"""GPU check of the format kernels: bit-exactness against the CPU torch reference, and throughput.

    source scripts/gpu/setup.sh && python3 scripts/gpu/formats_check.py --out "$OUT"
    python scripts/gpu/formats_check.py --small --out /tmp/fc      # CPU smoke test (Triton interpreter, no timing)

1. For every format (fp32, bf16, fp16, fp8, int8, e4m3, e5m2, nvfp4) and both roundings (fp32: RNE only),
   the Triton kernels (kernels/quantize.py; row-scaled fp8 / int8: kernels/quantize_rowscaled.py, codes
   and per-row scales) on CUDA must give exactly the bits of the CPU torch
   reference (quant/reference.py) on >= --n values (default 10**7) drawn from several
   distributions: normals at several scales, log-uniform magnitudes across the format's whole
   range, edge sets (every representable value, every midpoint, fp32 values 1-2 ulp either side,
   saturation/underflow edges, inf, NaN), random fp32 bit patterns; dequantization must be exact too.
   nvfp4 quantize is checked on both of its kernels (the fused one-program-per-state kernel and
   the amax pass + block-parallel pass); mismatches_quantize sums the two. A mismatch row records
   its first failing example (input, codes, scale bits, s_enc, expected and got bits as hex).
2. Throughput of quantize and dequantize (median of triton.testing.do_bench), GB/s counting the
   minimum bytes read + written, as a fraction of the device copy bandwidth measured in the same
   run (a large device-to-device copy, bytes read + written).

Writes under --out: results.csv (one row per check and per timing), throughput.png, report.md
(command, date, GPU, torch/triton versions, tables). Exit status 1 if any bit differs.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--small", action="store_true", help="CPU smoke test: interpreter, few values, no timing")
    p.add_argument("--n", type=int, default=None, help="values per (format, rounding) (default 1e7; --small: 6000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bench-elems", type=int, default=1 << 27, help="elements of the throughput tensor")
    return p.parse_args(argv)


ARGS = _parse()
import torch  # noqa: E402

if ARGS.small or not torch.cuda.is_available():
    if not ARGS.small:
        print("formats_check: no CUDA device; run with --small for a CPU smoke test", file=sys.stderr)
        sys.exit(2)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pandas as pd  # noqa: E402
import triton  # noqa: E402
from tqdm import tqdm  # noqa: E402

sys.path.insert(0, str(REPO))      # this checkout's code, also where another checkout is installed
import replayssm_quant  # noqa: E402

if str(REPO) not in replayssm_quant.__path__:    # map the top-level folders into the namespace
    replayssm_quant.__path__.append(str(REPO))

from replayssm_quant.kernels import quantize as kq  # noqa: E402
from replayssm_quant.kernels import quantize_rowscaled as kr  # noqa: E402
from replayssm_quant.quant import reference as ref  # noqa: E402
from replayssm_quant.quant.formats import FORMATS  # noqa: E402
from replayssm_quant.quant.philox import flat_rbits  # noqa: E402

FLT_MAX = 3.4028234663852886e38


# ----------------------------------------------------------------------------- inputs


def edge_set(fmt: str) -> torch.Tensor:
    """float32: representable values, midpoints, +-1/2 fp32 ulp around both, edges, specials; both signs."""
    info = FORMATS[fmt]
    specials = torch.tensor([0.0, float("inf"), float("nan"), FLT_MAX, 1e-45, 1e-38, info.max_finite,
                             info.max_finite * 1.0625, info.max_finite * 2, info.min_subnormal / 2,
                             info.min_subnormal / 4])
    if fmt in ("fp32", "nvfp4"):
        return torch.cat([specials, -specials])
    nb = ref.BITSPECS[fmt].nbits
    v = ref.decode_bits(torch.arange(0, 1 << (nb - 1)), fmt).double()
    v = v[torch.isfinite(v)].sort().values
    mids = (v[1:] + v[:-1]) / 2
    base = torch.cat([v, mids]).float()
    up, dn = torch.full_like(base, float("inf")), torch.zeros_like(base)
    u1, d1 = torch.nextafter(base, up), torch.nextafter(base, dn)
    x = torch.cat([specials, base, u1, d1, torch.nextafter(u1, up), torch.nextafter(d1, dn)])
    return torch.cat([x, -x])


def elem_inputs(fmt: str, n: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Named float32 distributions: n random values plus the edge set (sampled down to n/2 if larger)."""
    info = FORMATS[fmt]
    lo = max(info.min_subnormal / 8, 1e-45) if fmt != "fp32" else 1e-45
    hi = min(info.max_finite * 4, FLT_MAX)
    edges = edge_set(fmt)
    if edges.numel() > n // 2:
        edges = edges[torch.randperm(edges.numel(), generator=g)[: n // 2]]
    k = max(n // 6, 1)
    sign = lambda m: torch.where(torch.rand(m, generator=g) < 0.5, -1.0, 1.0)  # noqa: E731
    logu = torch.exp(torch.rand(3 * k, generator=g, dtype=torch.float64) * (math.log(hi) - math.log(lo))
                     + math.log(lo)).float() * sign(3 * k)
    pats = torch.randint(-2 ** 31, 2 ** 31, (k,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    d = {
        "normal*1e-3": torch.randn(k // 2, generator=g) * 1e-3,
        "normal*1": torch.randn(k // 2, generator=g),
        "normal*1e3": torch.randn(k, generator=g) * 1e3,
        "loguniform(range)": logu,
        "random fp32 bits": pats,
        "edges": edges,
    }
    short = n - sum(t.numel() for name, t in d.items() if name != "edges")
    if short > 0:
        d["normal*1"] = torch.cat([d["normal*1"], torch.randn(short, generator=g)])
    return d


def nvfp4_inputs(n: int, g: torch.Generator, R: int = 128, C: int = 128) -> dict[str, torch.Tensor]:
    """Named float32 [S, R, C] state stacks (S >= 8): three random ones of together >= n values, plus edges."""
    per = R * C
    S = max(math.ceil(n / per / 3), 8)
    amp = torch.exp(torch.rand(S, 1, 1, generator=g) * (math.log(1e30) - math.log(1e-30)) + math.log(1e-30))
    spread = torch.exp(torch.rand(S, R, C, generator=g) * math.log(1e-8))       # magnitudes 1e-8..1 of amp
    sgn = torch.where(torch.rand(S, R, C, generator=g) < 0.5, -1.0, 1.0)
    edge = torch.randn(S, R, C, generator=g)
    edge[:, 0, :16] = torch.tensor([2688.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, 6.0, 0.0,
                                    -0.0, 1e-3, 4.0, 3.0])
    edge[:, 1, :16] = 1e-3                                   # block scale underflows E4M3
    edge[:, 2, :16] = 1.2e-2                                 # E4M3-subnormal block scale
    edge[:, 3, :] = 0.0
    edge[::3, 4, 7] = float("nan")
    edge[1::3, 5, 9] = float("inf")
    edge[2::3, 6, 11] = -float("inf")
    edge[4::5] = 0.0                                         # all-zero states
    edge[3::7] *= 1e-40                                      # fp32-subnormal states: s_enc capped
    return {
        "normal*10^U(-20,20) per state": torch.randn(S, R, C, generator=g)
        * torch.pow(10.0, torch.rand(S, 1, 1, generator=g) * 40 - 20),
        "loguniform within state": (amp * spread * sgn).float(),
        "normal, blocks with 1e-6 outliers": torch.randn(S, R, C, generator=g)
        * torch.where(torch.rand(S, R, C // 16, 1, generator=g) < 0.5, 1.0, 1e-6).expand(S, R, C // 16, 16).reshape(S, R, C),
        "edges": edge,
    }


def rowscaled_inputs(fmt: str, n: int, g: torch.Generator, C: int = 128) -> dict[str, torch.Tensor]:
    """Named float32 row stacks [N, C] for the row-scaled formats: random rows of together >= n values, and
    edges: rows with amax = M (d = r = 1) holding every code value, every midpoint and fp32 values 1-2 ulp
    either side (clipped to the row's range), rows with one outlier, all-zero, NaN, +-inf, fp32-subnormal and
    FLT_MAX rows."""
    N = max(math.ceil(n / C / 3), 16)
    m = ref.ROW_MAX[fmt]
    if fmt == "fp8":
        grid = edge_set("e4m3")
    else:
        ints = torch.arange(0, 128, dtype=torch.float32)
        base = torch.cat([ints, ints + 0.5])
        up, dn = torch.full_like(base, float("inf")), torch.zeros_like(base)
        grid = torch.cat([base, torch.nextafter(base, up), torch.nextafter(base, dn)])
        grid = torch.cat([grid, -grid])
    grid = grid[torch.isfinite(grid) & (grid.abs() <= m)]
    k = math.ceil(grid.numel() / (C - 1))
    codes = torch.zeros(k * (C - 1))
    codes[: grid.numel()] = grid
    codes = torch.cat([torch.full((k, 1), m), codes.reshape(k, C - 1)], dim=1)   # amax = M: d = r = 1
    edge = torch.randn(16, C, generator=g)
    edge[0] = 0.0
    edge[1, 3] = float("nan")
    edge[2, 5], edge[2, 9] = float("inf"), -float("inf")
    edge[3] *= 1e-40
    edge[4] *= 3e-45
    edge[5, 0] = FLT_MAX
    edge[6] = float("nan")
    edge[7] = -0.0
    edge[8, 7] = 1e6                                          # one outlier
    return {
        "normal*10^U(-20,20) per row": torch.randn(N, C, generator=g) * torch.pow(10.0, torch.rand(N, 1, generator=g) * 40 - 20),
        "loguniform within row": torch.exp(torch.rand(N, C, generator=g) * math.log(1e-8)) * torch.randn(N, 1, generator=g)
        * torch.where(torch.rand(N, C, generator=g) < 0.5, -1.0, 1.0),
        "rows with one outlier": torch.randn(N, C, generator=g) * torch.where(
            torch.arange(C) == 0, 1e4, 1.0)[None],
        "random fp32 bits": torch.randint(-2 ** 31, 2 ** 31, (N, C), generator=g, dtype=torch.int64)
        .to(torch.int32).view(torch.float32),
        "edges": torch.cat([codes, edge]),
    }


def check_rowscaled(fmt, rounding, x_cpu, dev, seed):
    sr = rounding == "sr"
    rb = rbits_for(seed, x_cpu.numel()).reshape(x_cpu.shape) if sr else None
    wc, wd = ref.rowscaled_quantize(x_cpu, fmt, rounding, rb)
    c, d = (t.cpu() for t in kr.rowscaled_quantize(x_cpu.to(dev), fmt, sr, seed))
    bad_c, bad_d = c != wc, d.view(torch.int32) != wd.view(torch.int32)
    ex = ""
    if bad_c.any():
        i = bad_c.nonzero()[0].tolist()
        ex = f"x={x_cpu[tuple(i)].item()!r} at {i} d={_hex32(wd[i[0]])} got={int(c[tuple(i)])} want={int(wc[tuple(i)])}"
    elif bad_d.any():
        i = bad_d.nonzero()[0, 0].item()
        ex = f"row {i}: scale got={_hex32(d[i])} want={_hex32(wd[i])}"
    y = kr.rowscaled_dequantize(wc.to(dev), wd.to(dev), fmt).cpu()
    want_y = ref.rowscaled_dequantize(wc, wd, fmt)
    dq = y.view(torch.int32) != want_y.view(torch.int32)
    if dq.any() and not ex:
        i = dq.nonzero()[0].tolist()
        ex = f"dequantize at {i}: code={int(wc[tuple(i)])} got={_hex32(y[tuple(i)])} want={_hex32(want_y[tuple(i)])}"
    return int(bad_c.sum()) + int(bad_d.sum()), int(dq.sum()), ex


# ----------------------------------------------------------------------------- checks

_RB: dict[int, torch.Tensor] = {}


def rbits_for(seed: int, numel: int) -> torch.Tensor:
    """flat_rbits(seed, numel), computed once per seed for the largest size and sliced
    (the bits depend only on the seed and the flat index)."""
    have = _RB.get(seed)
    if have is None or have.numel() < numel:
        _RB[seed] = have = flat_rbits(seed, numel)
    return have[:numel]



def check_elem(fmt, rounding, x_cpu, dev, seed):
    sr = rounding == "sr"
    rb = rbits_for(seed, x_cpu.numel()).reshape(x_cpu.shape) if sr else None
    want = ref.encode_bits(x_cpu, fmt, rounding, rb)
    bits = kq.quantize_elem(x_cpu.to(dev), fmt, sr, seed).cpu()
    got = bits.view(torch.int32) if fmt == "fp32" else bits.to(torch.int32) & ((1 << (8 * bits.element_size())) - 1)
    bad = got != want
    ex = ""
    if bad.any():
        i = bad.nonzero()[0, 0].item()
        ex = f"x={x_cpu[i].item()!r} got={got[i].item():#x} want={want[i].item():#x}"
    back = kq.dequantize_elem(bits.to(dev), fmt).cpu()
    want_back = ref.decode_bits(want, fmt)
    dq = back.view(torch.int32) != want_back.view(torch.int32)
    if dq.any() and not ex:
        i = dq.nonzero()[0, 0].item()
        ex = (f"dequantize: x={x_cpu[i].item()!r} bits={want[i].item():#x} got={_hex32(back[i])} "
              f"want={_hex32(want_back[i])}")
    return int(bad.sum()), int(dq.sum()), ex


def _hex32(v: torch.Tensor) -> str:
    """fp32 scalar tensor -> its bit pattern as 0x%08x."""
    return f"{v.reshape(1).view(torch.int32).item() & 0xFFFFFFFF:#010x}"


def nvfp4_example(x, codes, sbits, s_enc, want, got) -> str:
    """First element where the dequantized ``got`` [L, R, C] differs from ``want`` in bits: its index,
    input value, code byte, scale bits, s_enc and both outputs as hex."""
    i = (got.view(torch.int32) != want.view(torch.int32)).nonzero()[0].tolist()
    r, c = i[-2], i[-1]
    lead = tuple(i[:-2])
    return (f"dequantize at {i}: x={x[tuple(i)].item()!r} code_byte={codes[(*lead, r, c // 2)].item():#04x} "
            f"scale_bits={sbits[(*lead, r, c // 16)].item():#04x} s_enc={_hex32(s_enc[lead])} "
            f"want={_hex32(want[tuple(i)])} got={_hex32(got[tuple(i)])}")


def check_nvfp4(rounding, x_cpu, dev, seed):
    sr = rounding == "sr"
    rb = rbits_for(seed, x_cpu.numel()).reshape(x_cpu.shape) if sr else None
    wc, ws, we = ref.nvfp4_quantize(x_cpu, rounding, rb)
    bad, ex = 0, ""
    fused_max = kq.FUSED_MAX_PER
    for path, limit in (("fused", fused_max), ("two-pass", 0)):   # both quantize kernels (see kq.FUSED_MAX_PER)
        kq.FUSED_MAX_PER = limit
        try:
            c, s, e = (t.cpu() for t in kq.nvfp4_quantize(x_cpu.to(dev), sr, seed))
        finally:
            kq.FUSED_MAX_PER = fused_max
        nbad = int((c != wc).sum()) + int((s != ws).sum()) + int((e.view(torch.int32) != we.view(torch.int32)).sum())
        if nbad and not ex:
            i = (c != wc).nonzero()
            ex = f"{path}: " + (f"first code mismatch at {i[0].tolist()}" if i.numel() else "scale/s_enc mismatch")
        bad += nbad
    y = kq.nvfp4_dequantize(wc.to(dev), ws.to(dev), we.to(dev)).cpu()
    want_y = ref.nvfp4_dequantize(wc, ws, we)
    dq_bad = int((y.view(torch.int32) != want_y.view(torch.int32)).sum())
    if dq_bad:
        ex = (ex + "; " if ex else "") + nvfp4_example(x_cpu, wc, ws, we, want_y, y)
    return bad, dq_bad, ex


def run_checks(n, dev, seed):
    rows = []
    g = torch.Generator().manual_seed(seed)
    jobs = [(f, r) for f in FORMATS for r in ("rne", "sr") if not (f == "fp32" and r == "sr")]
    for fmt, rounding in tqdm(jobs, desc="bit-exactness", file=sys.stdout):
        side = 32 if n < 10 ** 5 else (64 if n < 10 ** 6 else 128)
        if fmt == "nvfp4":
            dists = nvfp4_inputs(n, g, side, side)
        elif fmt in ref.ROW_MAX:
            dists = rowscaled_inputs(fmt, n, g, side)
        else:
            dists = elem_inputs(fmt, n, g)
        for name, x in dists.items():
            t0 = time.time()
            if fmt == "nvfp4":
                bad, dq_bad, ex = check_nvfp4(rounding, x, dev, seed + 1)
            elif fmt in ref.ROW_MAX:
                bad, dq_bad, ex = check_rowscaled(fmt, rounding, x, dev, seed + 1)
            else:
                bad, dq_bad, ex = check_elem(fmt, rounding, x, dev, seed + 1)
            rows.append(dict(section="check", format=fmt, rounding=rounding, distribution=name, n=x.numel(),
                             mismatches_quantize=bad, mismatches_dequantize=dq_bad, example=ex,
                             seconds=round(time.time() - t0, 2)))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- throughput


def storage_bytes(fmt, n, C=128):
    if fmt == "nvfp4":
        return n // 2 + n // 16 + 4 * (n // (C * C))
    if fmt in ref.ROW_MAX:
        return n + 4 * (n // C)                   # codes + one fp32 scale per row of C
    return n * int(FORMATS[fmt].bits_per_element) // 8


def run_bench(n, dev):
    from triton.testing import do_bench

    rows = []
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    t_copy = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    copy_bw = 2 * 4 * n / (t_copy * 1e-3) / 1e9
    rows.append(dict(section="throughput", format="-", op="device copy", n=n, time_ms=t_copy,
                     bytes=8 * n, GBps=copy_bw, frac_copy=1.0, passes_over_input=1))
    del dst
    C = 128
    x = src.reshape(-1, C, C)
    for fmt in tqdm(list(FORMATS), desc="throughput", file=sys.stdout):
        for rounding in ("rne", "sr"):
            if fmt == "fp32" and rounding == "sr":
                continue
            sr = rounding == "sr"
            if fmt == "nvfp4":
                q = kq.nvfp4_quantize(x, sr, 1)
                tq = do_bench(lambda: kq.nvfp4_quantize(x, sr, 1, out=q), warmup=25, rep=200, return_mode="median")
                # fused kernel: amax and quantize in one program per state, x read from DRAM once
                passes = 1 if C * C <= kq.FUSED_MAX_PER else 2
            elif fmt in ref.ROW_MAX:
                xr = src.reshape(-1, C)
                q = kr.rowscaled_quantize(xr, fmt, sr, 1)
                tq = do_bench(lambda: kr.rowscaled_quantize(xr, fmt, sr, 1, out=q), warmup=25, rep=200,
                              return_mode="median")
                passes = 1             # the amax pass and the encode pass of one program: the row from cache
            else:
                q = kq.quantize_elem(src, fmt, sr, 1)
                tq = do_bench(lambda: kq.quantize_elem(src, fmt, sr, 1, out=q), warmup=25, rep=200, return_mode="median")
                passes = 1
            b = 4 * n + storage_bytes(fmt, n, C)
            rows.append(dict(section="throughput", format=fmt, op=f"quantize ({rounding})", n=n, time_ms=tq, bytes=b,
                             GBps=b / (tq * 1e-3) / 1e9, frac_copy=b / (tq * 1e-3) / 1e9 / copy_bw,
                             passes_over_input=passes))
        y = torch.empty(n, device=dev)
        if fmt == "nvfp4":
            yv = y.reshape(x.shape)
            td = do_bench(lambda: kq.nvfp4_dequantize(*q, out=yv), warmup=25, rep=200, return_mode="median")
        elif fmt in ref.ROW_MAX:
            yv = y.reshape(-1, C)
            td = do_bench(lambda: kr.rowscaled_dequantize(*q, fmt, out=yv), warmup=25, rep=200, return_mode="median")
        else:
            td = do_bench(lambda: kq.dequantize_elem(q, fmt, out=y), warmup=25, rep=200, return_mode="median")
        b = 4 * n + storage_bytes(fmt, n, C)
        rows.append(dict(section="throughput", format=fmt, op="dequantize", n=n, time_ms=td, bytes=b,
                         GBps=b / (td * 1e-3) / 1e9, frac_copy=b / (td * 1e-3) / 1e9 / copy_bw, passes_over_input=1))
        del q, y
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- report


def md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def plot(bench: pd.DataFrame, path: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = bench[bench.format != "-"]
    labels = [f"{f}\n{o}" for f, o in zip(b.format, b.op)]
    fig, ax = plt.subplots(figsize=(max(8, 0.55 * len(b)), 4))
    ax.bar(range(len(b)), b.frac_copy)
    ax.set_xticks(range(len(b)), labels, rotation=90, fontsize=7)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_ylabel("fraction of device copy bandwidth")
    ax.set_title("quantize / dequantize throughput (bytes read + written)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if (torch.cuda.is_available() and not ARGS.small) else "cpu"
    n = ARGS.n or (6000 if ARGS.small else 10 ** 7)
    t0 = time.time()
    checks = run_checks(n, dev, ARGS.seed)
    bench = run_bench(ARGS.bench_elems, dev) if dev == "cuda" else pd.DataFrame()
    df = pd.concat([checks, bench], ignore_index=True)
    df.to_csv(out / "results.csv", index=False)
    tot = checks.groupby(["format", "rounding"], sort=False).agg(
        n=("n", "sum"), mismatches_quantize=("mismatches_quantize", "sum"),
        mismatches_dequantize=("mismatches_dequantize", "sum")).reset_index()
    ok = int(tot.mismatches_quantize.sum() + tot.mismatches_dequantize.sum()) == 0
    gpu = torch.cuda.get_device_name(0) if dev == "cuda" else f"none (CPU, Triton interpreter: {platform.processor() or platform.machine()})"
    lines = [
        "# Format kernels: bit-exactness and throughput",
        "",
        f"- command: `{' '.join([Path(sys.executable).name, *sys.argv])}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- device: {gpu}",
        f"- torch {torch.__version__}, triton {triton.__version__}, python {platform.python_version()}",
        f"- wall time: {time.time() - t0:.1f} s",
        "",
        f"## Bit-exactness: Triton on {dev} vs the CPU torch reference",
        "",
        f"Result: **{'all bits equal' if ok else 'MISMATCHES FOUND'}** "
        f"({int(tot.n.sum()):,} values over {len(tot)} format/rounding pairs; "
        f"{n:,} random values per pair plus the edge sets).",
        "",
        md_table(tot),
        "",
        "Per distribution:",
        "",
        md_table(checks.drop(columns=["section"])),
        "",
    ]
    if len(bench):
        plot(bench, out / "throughput.png")
        lines += [
            f"## Throughput ({ARGS.bench_elems:,} fp32 elements; median of triton.testing.do_bench)",
            "",
            "GB/s counts the minimum bytes: fp32 input read + storage written (quantize), or storage read +",
            "fp32 written (dequantize). nvfp4 quantize needs the state's amax before it can round: states",
            f"of up to {kq.FUSED_MAX_PER} elements (the 128x128 states here) take a fused kernel, one program",
            "per state, that reads the state twice but from DRAM once (`passes_over_input` = 1); larger states",
            "an amax pass, then the quantize pass (2). frac_copy = GB/s over the device-to-device copy bandwidth",
            "measured in this run (bytes read + written).",
            "",
            md_table(bench[["format", "op", "time_ms", "bytes", "GBps", "frac_copy", "passes_over_input"]]),
            "",
            "![throughput](throughput.png)",
            "",
        ]
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
