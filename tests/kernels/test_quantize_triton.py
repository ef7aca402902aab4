"""kernels/quantize.py launchers against the torch reference, bit for bit (RNE and SR, same seed).

Interpreter-friendly sizes: a few thousand well-chosen values (edge sets, log-uniform
magnitudes over each format's range, normals, random bit patterns incl. NaN), odd
shapes with partial tiles, outputs poisoned before every launch.
"""

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels import quantize as kq  # noqa: E402
from replayssm_quant.quant import api, dequantize, quantize  # noqa: E402
from replayssm_quant.quant import reference as ref  # noqa: E402
from replayssm_quant.quant.formats import FORMATS  # noqa: E402
from replayssm_quant.quant.philox import flat_rbits  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
ELEM = ["fp32", "bf16", "fp16", "e4m3", "e5m2"]
POISON = {torch.float32: float("nan"), torch.int16: 0x5A5A, torch.uint8: 0xA5}


def values(fmt, n=2000, seed=0):
    """Edge set + log-uniform magnitudes across the format's range + normals + random fp32 patterns."""
    info = FORMATS[fmt]
    g = torch.Generator().manual_seed(seed)
    mx = info.max_finite if fmt != "nvfp4" else 1e6
    lo = info.min_subnormal / 4 if fmt != "nvfp4" else 1e-12
    mag = torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * (math.log(mx * 2) - math.log(lo)) + math.log(lo))
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    edge = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), info.max_finite,
                         info.max_finite * 1.0625, info.min_subnormal, info.min_subnormal / 2,
                         info.min_normal, 1.0 + info.eps / 2, 1.0 + 1.5 * info.eps, 3.4028234663852886e38, 1e-45])
    pats = torch.randint(-2 ** 31, 2 ** 31, (n // 4,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([edge, (mag * sign).float(), torch.randn(n // 2, generator=g), pats])


@pytest.mark.parametrize("fmt,rounding", [(f, r) for f in ELEM for r in ("rne", "sr") if (f, r) != ("fp32", "sr")])
def test_elem_kernels_match_reference(fmt, rounding):
    x = values(fmt)
    x = x[: (x.numel() // 7) * 7].reshape(7, -1).to(DEV)        # odd shape, flat tail not a multiple of 1024
    seed = 77
    dt = kq.STORAGE_DTYPE[fmt]
    out = torch.full(x.shape, POISON[dt], dtype=dt, device=DEV)
    bits = kq.quantize_elem(x, fmt, rounding == "sr", seed, out=out)
    rb = flat_rbits(seed, x.numel(), DEV).reshape(x.shape) if rounding == "sr" else None
    want = ref.encode_bits(x, fmt, rounding, rb)
    if fmt == "fp32":
        assert torch.equal(bits.view(torch.int32), want)
    else:
        mask = (1 << (8 * bits.element_size())) - 1
        got = bits.to(torch.int32) & mask
        bad = got != want
        assert not bad.any(), f"{fmt}/{rounding}: {int(bad.sum())} mismatches, x={x[bad][0].item()!r}"
    y = torch.full(x.shape, float("nan"), device=DEV)
    kq.dequantize_elem(bits, fmt, out=y)
    assert torch.equal(y.view(torch.int32), ref.decode_bits(want, fmt).view(torch.int32))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("shape", [(3, 5, 48), (2, 17, 144), (1, 16)])
def test_nvfp4_kernels_match_reference(rounding, shape, fused, monkeypatch):
    """Both quantize paths: fused single pass (states up to FUSED_MAX_PER elements) and amax pass +
    block-parallel pass (forced here by lowering the threshold)."""
    if not fused:
        monkeypatch.setattr(kq, "FUSED_MAX_PER", 0)
    g = torch.Generator().manual_seed(sum(shape))
    n = math.prod(shape)
    v = values("nvfp4", n)
    x = v[torch.randperm(v.numel(), generator=g)[:n]].reshape(shape).clone()
    x.view(-1, shape[-1])[0, :16] = torch.tensor([2688.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0,
                                                  -0.25, -0.75, 6.0, 0.0, -0.0, 1e-3, 4.0, 3.0])
    x = x.to(DEV)
    seed = 5
    sh = x.shape
    out = (torch.full((*sh[:-1], sh[-1] // 2), 0xA5, dtype=torch.uint8, device=DEV),
           torch.full((*sh[:-1], sh[-1] // 16), 0x33, dtype=torch.uint8, device=DEV),
           torch.full(sh[:-2], float("nan"), device=DEV))
    codes, sbits, s_enc = kq.nvfp4_quantize(x, rounding == "sr", seed, out=out)
    rb = flat_rbits(seed, x.numel(), DEV).reshape(sh) if rounding == "sr" else None
    wc, ws, we = ref.nvfp4_quantize(x, rounding, rb)
    assert torch.equal(s_enc.view(torch.int32), we.view(torch.int32))
    assert torch.equal(sbits, ws)
    assert torch.equal(codes, wc)
    y = torch.full(sh, 12345.0, device=DEV)
    kq.nvfp4_dequantize(codes, sbits, s_enc, out=y)
    assert torch.equal(y.view(torch.int32), ref.nvfp4_dequantize(wc, ws, we).view(torch.int32))


def test_nvfp4_dequantize_nan_bits_are_canonical():
    """Every NaN that nvfp4 dequantize returns is 0x7FC00000, in the reference and the kernel.

    Pins the GPU fix: NaN blocks (scale bits 0x7F / 0xFF) used to decode through fp32 arithmetic on
    the NaN scale, which keeps the operand's NaN bits on x86 (0x7FC00000 / 0xFFC00000) but returns
    0x7FFFFFFF on NVIDIA GPUs (880 mismatches = the 55 NaN blocks of formats_check's edge set).
    Also NaNs from a bad s_enc (0/0, a NaN with payload) and every code in a NaN block."""
    L, R, C = 4, 3, 32
    g = torch.Generator().manual_seed(11)
    codes = torch.randint(0, 256, (L, R, C // 2), generator=g, dtype=torch.uint8)
    sbits = torch.randint(0, 0x7F, (L, R, C // 16), generator=g, dtype=torch.uint8)
    sbits[0, 0, 0], sbits[0, 1, 1], sbits[1, 2, 0] = 0x7F, 0xFF, 0xFF        # NaN scales, +- sign
    codes[0, 0, :8] = torch.arange(0, 256, 32, dtype=torch.uint8) | 0x88     # negative codes in a NaN block
    codes[2, 0, :8] = 0                                                      # zero codes with s_enc 0: 0/0
    s_enc = torch.tensor([1.5, 7.0, 0.0, 0.0])
    s_enc.view(torch.int32)[3] = 0x7FA00001                                  # NaN with a payload
    want = ref.nvfp4_dequantize(codes, sbits, s_enc)
    wb = want.view(torch.int32)
    nan = torch.isnan(want)
    assert nan[0, 0, :16].all() and nan[0, 1, 16:].all() and nan[1, 2, :16].all() and nan[3].all()
    assert nan[2, 0, :16].all() and not nan[0, 2].any()
    assert (wb[nan] == 0x7FC00000).all()
    y = torch.full((L, R, C), 12345.0, device=DEV)
    kq.nvfp4_dequantize(codes.to(DEV), sbits.to(DEV), s_enc.to(DEV), out=y)
    assert torch.equal(y.cpu().view(torch.int32), wb)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_api_backends_agree(fmt):
    x = torch.randn(3, 4, 32, device=DEV) * 10
    for rounding in (["rne"] if fmt == "fp32" else ["rne", "sr"]):
        a = quantize(x, fmt, rounding, seed=3, backend="torch")
        b = quantize(x, fmt, rounding, seed=3, backend="triton")
        assert torch.equal(a.data, b.data)
        if fmt == "nvfp4":
            assert torch.equal(a.scales, b.scales) and torch.equal(a.s_enc, b.s_enc)
        assert torch.equal(dequantize(a, "torch").view(torch.int32), dequantize(b, "triton").view(torch.int32))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16), (3, 0)])
def test_api_backends_agree_on_empty_tensors(fmt, shape):
    if fmt == "nvfp4" and (shape[-1] % 16 or not shape[-1]):   # (C = 0 is refused: no blocks)
        return
    x = torch.empty(shape, device=DEV)
    for rounding in (["rne"] if fmt == "fp32" else ["rne", "sr"]):
        a = quantize(x, fmt, rounding, seed=3, backend="torch")
        b = quantize(x, fmt, rounding, seed=3, backend="triton")
        for name in ("data", "scales", "s_enc"):
            ta, tb = getattr(a, name), getattr(b, name)
            assert (ta is None) == (tb is None) and (ta is None or torch.equal(ta, tb)), name


def test_launcher_errors():
    x = torch.ones(4, 24, device=DEV)
    with pytest.raises(ValueError, match="multiple of 16"):
        kq.nvfp4_quantize(x)
    with pytest.raises(ValueError, match="float32"):
        kq.quantize_elem(x.double(), "e4m3")
    with pytest.raises(ValueError, match="format"):
        kq.quantize_elem(x, "nvfp4")
    with pytest.raises(ValueError, match="out must be"):
        kq.quantize_elem(x, "e4m3", out=torch.empty(4, 24, dtype=torch.int16, device=DEV))
    with pytest.raises(ValueError, match="storage must be"):
        kq.dequantize_elem(torch.zeros(3, dtype=torch.int16, device=DEV), "e4m3")


def test_formats_check_script_smoke(tmp_path):
    """scripts/gpu/formats_check.py --small runs on CPU (interpreter) and reports all bits equal."""
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "formats_check.py"
    r = subprocess.run([sys.executable, str(script), "--small", "--n", "1200", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_csv(tmp_path / "results.csv")
    assert set(df.format) == set(FORMATS) and len(df[df.rounding == "sr"].format.unique()) == 7
    assert df.mismatches_quantize.sum() == 0 and df.mismatches_dequantize.sum() == 0
    rep = (tmp_path / "report.md").read_text()
    assert "all bits equal" in rep and "torch" in rep and "--small" in rep


_XCOMPILE = r'''
import re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from replayssm_quant.kernels import quantize as kq
tgt = GPUTarget("cuda", 90, 32)
jobs = [
    (kq._quantize_elem_kernel, {"x_ptr": "*fp32", "out_ptr": "*u8", "n": "i32", "seed": "i32", "FMT": "constexpr",
                                "SR": "constexpr", "BLOCK": "constexpr"}, {"FMT": 3, "SR": True, "BLOCK": 1024}),
    (kq._nvfp4_quantize_kernel, {"x_ptr": "*fp32", "amax_ptr": "*i32", "codes_ptr": "*u8", "sb_ptr": "*u8",
                                 "senc_ptr": "*fp32", "nblocks": "i32", "bper": "i32", "seed": "i32",
                                 "SR": "constexpr", "NB": "constexpr"}, {"SR": True, "NB": 128}),
    (kq._nvfp4_quantize_fused_kernel, {"x_ptr": "*fp32", "codes_ptr": "*u8", "sb_ptr": "*u8", "senc_ptr": "*fp32",
                                       "seed": "i32", "BPER": "constexpr", "SR": "constexpr", "NB": "constexpr"},
     {"BPER": 1024, "SR": False, "NB": 128}),
    (kq._nvfp4_dequantize_kernel, {"codes_ptr": "*u8", "sb_ptr": "*u8", "senc_ptr": "*fp32", "out_ptr": "*fp32",
                                   "nblocks": "i32", "bper": "i32", "NB": "constexpr"}, {"NB": 128}),
]
for fn, sig, const in jobs:
    # pointers 16-byte aligned, as the launcher's torch tensors are (the runtime specializes on it)
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
    ptx = triton.compile(ASTSource(fn, sig, const, attrs), target=tgt).asm["ptx"]
    divs = sorted(set(re.findall(r"\bdiv\.[a-z]+\.f32", ptx)))
    print(fn.__name__, "|".join(divs) or "-", len(re.findall(r"\bdiv\.rn\.f32", ptx)),
          len(re.findall(r"\bst\.global\.v4\.b32", ptx)), len(re.findall(r"\bst\.global\.b32", ptx)),
          ptx.count("2143289344"), len(re.findall(r"\bfma\.", ptx)), len(re.findall(r"\.ftz\.", ptx)))
'''


def test_kernels_compile_for_sm90_with_ieee_division():
    """Cross-compile the launch kernels to PTX for an H100/H200 (sm_90) on this machine (no GPU
    needed): they must compile, every fp32 division must be IEEE div.rn (Triton's own '/'
    would give div.full.f32, up to 2 ulp off), with no flush-to-zero instructions and no fma
    (fp-fusion would contract a*b+c; the interpreter never does) except where it is harmless. The nvfp4 dequantize kernel:
    one division per block (16 elements per thread: one div.rn in the PTX), 128-bit stores
    (no scalar fp32 stores), and the NaN canonicalisation (0x7FC00000 = 2143289344) present."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _XCOMPILE], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.strip().splitlines()}
    assert set(rows) == {"_quantize_elem_kernel", "_nvfp4_quantize_kernel", "_nvfp4_quantize_fused_kernel",
                         "_nvfp4_dequantize_kernel"}
    for name, (divs, n_div, n_v4, n_st, n_nan, n_fma, n_ftz) in rows.items():
        assert "div.full" not in divs and "div.approx" not in divs, (name, divs)
        assert n_ftz == "0", (name, n_ftz)
        # nvfp4 quantize: the only fusible a*b+c are the RNE thresholds of rounding._xs_threshold,
        # whose products are exact, so an fma there gives the same bits (tested in the interpreter)
        assert n_fma == "0" or name in ("_nvfp4_quantize_kernel", "_nvfp4_quantize_fused_kernel"), (name, n_fma)
    assert "div.rn.f32" in rows["_nvfp4_quantize_kernel"][0] and "div.rn.f32" in rows["_nvfp4_quantize_fused_kernel"][0]
    divs, n_div, n_v4, n_st, n_nan, n_fma, n_ftz = rows["_nvfp4_dequantize_kernel"]
    assert divs == "div.rn.f32" and n_div == "1", rows
    assert int(n_v4) >= 4 and n_st == "0" and int(n_nan) >= 16, rows


def test_auto_backend_takes_torch_where_the_gpu_lacks_e4m3_conversions(monkeypatch):
    """Below compute capability 8.9 (faked here) the ``"auto"`` backend takes the torch reference for the kernels
    that need E4M3 conversions (RNE encodes into fp8 / e4m3, decodes of fp8 / e4m3 / nvfp4) and Triton for the
    others; an explicit ``"triton"`` backend keeps Triton, whose launchers then refuse with the message."""
    cuda = torch.device("cuda")
    for cc, ok in (((8, 0), False), ((9, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, cc=cc: cc)
        for fmt, sr, decode, needs in (("nvfp4", False, False, False), ("nvfp4", True, False, False),
                                       ("nvfp4", False, True, True), ("fp8", False, False, True),
                                       ("fp8", True, False, False), ("fp8", False, True, True),
                                       ("e4m3", False, False, True), ("e4m3", True, False, False),
                                       ("e5m2", False, True, False), ("int8", False, True, False),
                                       ("fp16", False, False, False)):
            runs = ok or not needs
            assert kq.runs_on(cuda, fmt, sr, decode) is runs, (cc, fmt, sr, decode)
            # (None: the torch reference; the registered module may be imported under a second name, so no `is kq`)
            assert (api._triton("auto", cuda, fmt, sr, decode) is not None) is runs, (cc, fmt, sr, decode)
            assert api._triton("triton", cuda, fmt, sr, decode) is not None
    x = torch.zeros(2, 16, device="cpu")
    assert kq.runs_on(x.device, "nvfp4", decode=True)     # CPU tensors: the interpreter takes every format
