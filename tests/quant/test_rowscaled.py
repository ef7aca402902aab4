"""Row-scaled fp8 / int8 reference (quant/reference.py) against an independent float64 oracle; SR unbiased
through the scale; the API's storage and errors."""

import math

import numpy as np
import pytest
import torch

from replayssm_quant.quant import dequantize, fake_quantize, quantize
from replayssm_quant.quant import reference as ref
from replayssm_quant.quant.philox import flat_rbits

from _formats_oracle import nonneg_values, torch_cast_bits

M = {"fp8": 448.0, "int8": 127.0}
FLT_MAX = float(np.finfo(np.float32).max)


def rows(seed=0):
    """[12, 40] rows: random normals, log-uniform magnitudes over 60 binades, one outlier per row, an all-zero
    row, rows with NaN and +-inf, rows entirely in fp32's subnormal range, a row at FLT_MAX, a -0 row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, 40, generator=g)
    x[1] = torch.exp(torch.rand(40, generator=g) * 60 - 40) * torch.sign(torch.randn(40, generator=g))
    x[2, 7] = 1e4                                   # one outlier: the rest of the row lies far below d
    x[3] = 0.0
    x[4, 5], x[4, 9] = float("nan"), 3.0
    x[5, 0], x[5, 11] = float("inf"), -float("inf")
    x[6] = torch.randn(40, generator=g) * 1e-40     # fp32 subnormals
    x[7] = torch.randn(40, generator=g) * 1e-44     # amax below M * 2**-150 for some: d underflows
    x[8, 3] = FLT_MAX
    x[9] = -0.0
    x[10] = float("nan")
    x[11] = torch.randn(40, generator=g) * 1e-3
    return x


def oracle(x: torch.Tensor, fmt: str):
    """float64 oracle of the pinned arithmetic: (codes as float64 values, d float32, values float32)."""
    m = M[fmt]
    xc = torch.where(torch.isnan(x), x, x.clamp(-FLT_MAX, FLT_MAX)).double()
    amax = torch.where(torch.isnan(xc), 0.0, xc.abs()).amax(-1)
    # D_MAX: the largest fp32 D with fp32(m * D) finite, by search from fp32(FLT_MAX / m)
    dmax = np.float32(FLT_MAX / m)
    while np.float64(dmax) * m > FLT_MAX * (1 + 2.0 ** -25):     # fp32(m * D) would round to inf
        dmax = np.nextafter(dmax, np.float32(0))
    d = torch.minimum((amax / m).float().double(), torch.tensor(float(dmax), dtype=torch.float64))
    r = torch.minimum((m / torch.where(amax == 0, 1.0, amax)).float().double(), torch.tensor(FLT_MAX).double())
    d = torch.where(amax == 0, 1.0, d).float()
    r = torch.where(amax == 0, 1.0, r).float()
    xs = (xc * r.double()[:, None]).float()        # exact product, one rounding
    if fmt == "fp8":
        bits = torch_cast_bits(xs.clamp(-448, 448), "e4m3")
        q = ref.decode_bits(bits, "e4m3").double()   # (decode is exact; checked in test_reference_casts)
    else:
        q = torch.round(xs.double()).clamp(-127, 127)   # round half to even
        q = torch.where(torch.isnan(xs), float("nan"), q)
    return q, d, (q * d.double()[:, None]).float()


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_rne_matches_float64_oracle(fmt):
    x = rows()
    codes, d = ref.rowscaled_quantize(x, fmt)
    q, d_want, v_want = oracle(x, fmt)
    assert torch.equal(d.view(torch.int32), d_want.view(torch.int32))
    v = ref.rowscaled_dequantize(codes, d, fmt)
    nan = torch.isnan(v_want)
    assert torch.equal(torch.isnan(v), nan)
    assert torch.equal(v[~nan], v_want[~nan])
    assert (v[nan].view(torch.int32) == 0x7FC00000).all()          # canonical NaN
    assert torch.isfinite(v[~nan]).all()                            # saturating: inf rows give +-amax, never inf
    assert v[5, 0] > 3e38 and v[5, 11] < -3e38 and v[3].abs().max() == 0 and (d[3] == 1)
    assert (v[9].view(torch.int32) == (int(-2 ** 31) if fmt == "fp8" else 0)).all()   # -0 kept by fp8 only
    # per-row error bound: half a code step at the row's amax (fp8: 448 has spacing 32), for rows whose d is a
    # normal fp32 (amax >= M * 2**-126; below, d has fewer significant bits: the subnormal rows 6, 7)
    fin = torch.isfinite(x).all(-1) & (x.abs().amax(-1) >= M[fmt] * 2.0 ** -126)
    assert fin.sum() == 5
    amax = x[fin].abs().amax(-1, keepdim=True)
    step = 32 / 448 if fmt == "fp8" else 1 / 127
    assert ((v[fin] - x[fin]).abs() <= amax * step / 2 * (1 + 1e-5) + 1e-45).all()


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_int8_codes_and_nan_code(fmt):
    x = torch.tensor([[127.0, 1.5, 2.5, -0.5, -126.5, float("nan"), -127.0, 0.49]])
    codes, d = ref.rowscaled_quantize(x, fmt)
    if fmt == "int8":
        assert d.item() == 1.0 and codes.tolist() == [[127, 2, 2, 0, -126, -128, -127, 0]]
    else:
        assert codes.dtype == torch.uint8 and codes[0, 5].item() & 0x7F == 0x7F


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_sr_only_neighbours_and_unbiased_through_the_scale(fmt):
    """N = 20000 copies of one row (an outlier row: most entries far below its amax) with independent Philox bits.
    Each draw is one of the two codes around xs = x * r, and the mean value is within 5 standard errors of x
    (SE from the sample variance; with 2 * 32 elements a false failure has probability < 1e-4) plus the
    deterministic bias bound: the 16 random bits truncate P(up) by < 2**-16 of a code step, and r * d = 1
    within 2**-22 relative."""
    g = torch.Generator().manual_seed(3)
    row = torch.randn(32, generator=g) * torch.exp(torch.rand(32, generator=g) * 8 - 4)
    row[0] = 50.0
    N = 20000
    xs = row[None].expand(N, -1).contiguous()
    codes, d = ref.rowscaled_quantize(xs, fmt, "sr", flat_rbits(11, xs.numel()).reshape(xs.shape))
    assert (d == d[0]).all()
    v = ref.rowscaled_dequantize(codes, d, fmt).double()
    rne = ref.rowscaled_dequantize(*ref.rowscaled_quantize(row[None], fmt), fmt).double()[0]
    # the two codes around xs = fp32(x * r), as values fp32(code * d)
    dd, r = ref.rowscaled_scales(ref.rowscaled_amax(row), fmt)
    assert dd == d[0]
    xr = (row * r).double()
    if fmt == "int8":
        grid = torch.arange(-127, 128, dtype=torch.float64)
    else:
        pos = nonneg_values("e4m3")
        grid = torch.cat([-pos.flip(0), pos])
    lo_c = grid[torch.searchsorted(grid, xr, right=True) - 1]
    hi_c = grid[torch.clamp(torch.searchsorted(grid, xr, right=False), max=grid.numel() - 1)]
    lo, hi = (lo_c * dd.double()).float().double(), (hi_c * dd.double()).float().double()
    assert ((v == lo) | (v == hi)).all(), "SR produced a value that is not a neighbour"
    assert ((rne == lo) | (rne == hi)).all()
    mean, se = v.mean(0), v.std(0) / math.sqrt(N)
    bias = (hi - lo) * 2 ** -16 + row.double().abs() * 2 ** -22
    err = (mean - row.double()).abs()
    assert (err <= 5 * se + bias + 1e-30).all(), f"biased: {err.max()} vs {(5 * se + bias).max()}"
    # and it is really stochastic: not the RNE value everywhere
    assert not torch.equal(v[0], rne) or not torch.equal(v[1], rne)


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_api_storage_reproducible_sr_and_errors(fmt):
    x = rows(1)[:, :32]
    a = quantize(x, fmt, "sr", seed=5, backend="torch")
    b = quantize(x, fmt, "sr", seed=5, backend="torch")
    c = quantize(x, fmt, "sr", seed=6, backend="torch")
    assert torch.equal(a.data, b.data) and not torch.equal(a.data, c.data)
    assert a.scales.shape == (12,) and a.data.dtype == (torch.uint8 if fmt == "fp8" else torch.int8)
    assert torch.equal(a.scales, quantize(x, fmt, backend="torch").scales)          # the scale is never random
    y = fake_quantize(x[None], fmt, backend="torch")
    assert torch.equal(y[0].nan_to_num(), dequantize(quantize(x, fmt, backend="torch"), backend="torch").nan_to_num())
    with pytest.raises(ValueError, match="at least one dim"):
        quantize(torch.tensor(1.0), fmt, backend="torch")
    with pytest.raises(ValueError, match="scales must be float32"):
        ref.rowscaled_dequantize(a.data, a.scales[:3], fmt)
    with pytest.raises(ValueError, match="row-scaled"):
        ref.encode_bits(x, fmt)


def test_d_max_constants_are_the_largest_finite_decoders():
    for fmt, m in M.items():
        dmax = np.float32(ref.ROW_D_MAX[fmt])
        assert torch.isfinite(torch.tensor(float(dmax)) * m)
        assert not torch.isfinite(torch.tensor(float(np.nextafter(dmax, np.float32(np.inf)))) * m)
