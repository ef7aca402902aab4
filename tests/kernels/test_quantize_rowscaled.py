"""kernels/quantize_rowscaled.py (row-scaled fp8 / int8) against the torch reference, bit for bit: codes, scales
and decoded values, RNE and SR (same seed), random rows, rows with one outlier, all-zero rows, NaN / inf rows,
rows in fp32's subnormal range; odd row lengths (partial tiles, row lengths not a multiple of 8, several column
chunks); outputs poisoned before every launch."""

import os

import pytest
import torch
import triton
import triton.language as tl

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels import quantize_rowscaled as kr  # noqa: E402
from replayssm_quant.kernels.rowscaled import row_values  # noqa: E402
from replayssm_quant.quant import format_codes as fcode  # noqa: E402
from replayssm_quant.quant import dequantize, quantize  # noqa: E402
from replayssm_quant.quant import reference as ref  # noqa: E402
from replayssm_quant.quant.philox import flat_rbits  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FMTS = ["fp8", "int8"]


def cases(C: int, seed: int = 0) -> torch.Tensor:
    """[10, C] rows of the kinds the issue names."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(10, C, generator=g)
    x[1] = torch.exp(torch.rand(C, generator=g) * 70 - 45) * torch.sign(torch.randn(C, generator=g))
    x[2, C // 2] = 3e5                                                    # one outlier
    x[3] = 0.0                                                            # all zero
    x[4, 1] = float("nan")
    x[5, 0], x[5, C - 1] = float("inf"), -float("inf")
    x[6] = torch.randn(C, generator=g) * 1e-39                            # fp32 subnormals
    x[7] = torch.randn(C, generator=g) * 3e-45                            # d underflows to 0
    x[8] = -0.0
    pats = torch.randint(-2 ** 31, 2 ** 31, (C,), generator=g, dtype=torch.int64).to(torch.int32)
    x[9] = pats.view(torch.float32)                                       # any bit pattern (NaN, inf, subnormal)
    return x


def _poisoned(shape, dtype):
    if dtype == torch.float32:
        return torch.full(shape, float("nan"), device=DEV)
    return torch.full(shape, 0x5A, dtype=dtype, device=DEV)


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("C", [16, 13, 1100])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_quantize_dequantize_bit_exact(fmt, C, rounding):
    x = cases(C, seed=C).reshape(2, 5, C)
    sr = rounding == "sr"
    rb = flat_rbits(7, x.numel()).reshape(x.shape) if sr else None
    c_ref, d_ref = ref.rowscaled_quantize(x, fmt, rounding, rb)
    out = (_poisoned(x.shape, kr.CODE_DTYPE[fmt]), _poisoned(x.shape[:-1], torch.float32))
    codes, d = kr.rowscaled_quantize(x.to(DEV), fmt, sr, seed=7, out=out)
    assert codes is out[0] and d is out[1]
    assert torch.equal(codes.cpu(), c_ref), f"{fmt} codes differ"
    assert torch.equal(_bits(d.cpu()), _bits(d_ref)), f"{fmt} scales differ"
    v_ref = ref.rowscaled_dequantize(c_ref, d_ref, fmt)
    v = kr.rowscaled_dequantize(codes, d, fmt, out=_poisoned(x.shape, torch.float32))
    assert torch.equal(_bits(v.cpu()), _bits(v_ref)), f"{fmt} values differ"
    if sr:     # SR really drew: not the RNE codes everywhere
        assert not torch.equal(c_ref, ref.rowscaled_quantize(x, fmt)[0])


@pytest.mark.parametrize("fmt", FMTS)
def test_api_triton_equals_torch_and_empty_tensors(fmt):
    x = cases(24, seed=3)
    a = quantize(x, fmt, "sr", seed=9, backend="torch")
    b = quantize(x.to(DEV), fmt, "sr", seed=9, backend="triton")
    assert torch.equal(a.data, b.data.cpu()) and torch.equal(_bits(a.scales), _bits(b.scales.cpu()))
    assert torch.equal(_bits(dequantize(a, backend="torch")), _bits(dequantize(b, backend="triton").cpu()))
    codes, d = kr.rowscaled_quantize(torch.zeros(0, 16, device=DEV), fmt)
    assert codes.shape == (0, 16) and d.shape == (0,)


def test_errors():
    x = torch.ones(3, 8, device=DEV)
    with pytest.raises(ValueError, match="row-scaled"):
        kr.rowscaled_quantize(x, "e4m3")
    with pytest.raises(ValueError, match="float32"):
        kr.rowscaled_quantize(x.double(), "fp8")
    codes, d = kr.rowscaled_quantize(x, "int8")
    with pytest.raises(ValueError, match="int8 codes must be torch.int8"):
        kr.rowscaled_dequantize(codes.view(torch.uint8), d, "int8")
    with pytest.raises(ValueError, match="one per row"):
        kr.rowscaled_dequantize(codes, d[:2], "int8")


_XCOMPILE = r'''
import re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from replayssm_quant.kernels import quantize_rowscaled as kr
from replayssm_quant.quant.format_codes import FP8, INT8
tgt = GPUTarget("cuda", 90, 32)
q_sig = {"x_ptr": "*fp32", "codes_ptr": "*u8", "d_ptr": "*fp32", "n_rows": "i32", "seed": "i32", "C": "constexpr",
         "FMT": "constexpr", "SR": "constexpr", "ALIGNED": "constexpr", "BR": "constexpr", "BC": "constexpr"}
d_sig = {"codes_ptr": "*u8", "d_ptr": "*fp32", "out_ptr": "*fp32", "n_rows": "i32", "C": "constexpr",
         "FMT": "constexpr", "BR": "constexpr", "BC": "constexpr"}
jobs = []
for fmt, ty in ((FP8, "*u8"), (INT8, "*i8")):
    for sr, aligned, C in ((False, True, 128), (True, True, 128), (True, False, 13)):
        jobs.append((f"q{fmt}{int(sr)}{int(aligned)}", kr._rowscaled_quantize_kernel, dict(q_sig, codes_ptr=ty),
                     {"C": C, "FMT": fmt, "SR": sr, "ALIGNED": aligned, "BR": 16, "BC": 128 if C == 128 else 16}))
    jobs.append((f"d{fmt}", kr._rowscaled_dequantize_kernel, dict(d_sig, codes_ptr=ty),
                 {"C": 128, "FMT": fmt, "BR": 16, "BC": 128}))
for name, fn, sig, const in jobs:
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
    ptx = triton.compile(ASTSource(fn, sig, const, attrs), target=tgt).asm["ptx"]
    divs = sorted(set(re.findall(r"\bdiv\.[a-z]+\.f32", ptx)))
    print(name, "|".join(divs) or "-", len(re.findall(r"\.ftz\.", ptx)), len(re.findall(r"\bcvt\.rn\.satfinite\.e4m3x2", ptx)))
'''


def test_kernels_compile_for_sm90_with_ieee_division():
    """Cross-compile the row-scaled quantize / dequantize kernels to PTX for sm_90 (no GPU needed): they compile,
    the per-row divisions are IEEE div.rn (Triton's '/' would be div.full, up to 2 ulp off), no flush-to-zero; RNE
    fp8 takes the hardware E4M3 cast."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _XCOMPILE], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.strip().splitlines()}
    assert len(rows) == 8
    for name, (divs, n_ftz, n_cvt) in rows.items():
        assert divs == ("div.rn.f32" if name.startswith("q") else "-"), (name, divs)
        assert n_ftz == "0", name
    assert int(rows["q701"][2]) > 0 and int(rows["q811"][2]) == 0   # fp8 RNE: cvt.rn.satfinite.e4m3x2; int8: none


@triton.jit
def _int8_values_kernel(codes_ptr, out_ptr, out_raw_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    codes = tl.load(codes_ptr + offs, mask=m, other=0)
    tl.store(out_ptr + offs, row_values(codes, fcode.INT8, True), mask=m)
    tl.store(out_raw_ptr + offs, row_values(codes, fcode.INT8, False), mask=m)


@pytest.mark.parametrize("dtype,stored", [(torch.int8, "int8"), (torch.int32, "signed"), (torch.int32, "bytes")])
def test_int8_values_every_code(dtype, stored):
    """rowscaled.row_values for int8, every code in shuffled positions (int8 storage, int32 holding the signed
    values or the bytes 0..255), two programs and a masked tail: the value c exactly; the NaN code -128 as
    0x7FC00000 with NAN_BITS, some NaN without (the select-free path of the non-flush read)."""
    g = torch.Generator().manual_seed(5)
    c = torch.arange(-128, 128)[torch.randperm(256, generator=g)].repeat(2)[:301]
    codes = (c & 0xFF if stored == "bytes" else c).to(dtype).to(DEV)
    out, raw = torch.full((301,), -1.5, device=DEV), torch.full((301,), -1.5, device=DEV)   # poison: no code's value
    _int8_values_kernel[(2,)](codes_ptr=codes, out_ptr=out, out_raw_ptr=raw, N=301, BLOCK=256)
    nan = (c == -128).to(DEV)
    want = c.to(DEV).float()
    assert torch.equal(out[~nan], want[~nan]) and torch.equal(raw[~nan], want[~nan])
    assert torch.all(out[nan].view(torch.int32) == 0x7FC00000) and torch.all(torch.isnan(raw[nan]))
