"""Stochastic rounding: matches its definition, unbiased, only neighbours, reproducible, seed-dependent."""

import math

import pytest
import torch

from replayssm_quant.quant import fake_quantize, quantize
from replayssm_quant.quant import reference as ref
from replayssm_quant.quant.philox import flat_rbits, philox4x32, philox_uint32

from _formats_oracle import MAX, nonneg_values, sr_expected

FMTS = ["bf16", "fp16", "e4m3", "e5m2", "e2m1"]


def _probe_values(fmt, n=400, seed=0):
    """Values spread over the whole range: log-uniform magnitudes incl. subnormals, near max, both signs."""
    v = nonneg_values(fmt)
    g = torch.Generator().manual_seed(seed)
    lo, hi = math.log(v[1].item() / 4), math.log(v[-1].item())
    mag = torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo)
    edge = torch.tensor([v[1] / 3, v[1] * 1.5, v[-1] * 0.999, v[-2] + (v[-1] - v[-2]) / 3, 1.1, 0.3],
                        dtype=torch.float64)
    x = torch.cat([mag, edge]).float()
    sign = torch.where(torch.rand(x.shape, generator=g) < 0.5, -1.0, 1.0)
    return x * sign


@pytest.mark.parametrize("fmt", FMTS)
def test_sr_matches_definition(fmt):
    """Bit-exact against round-up-iff r + 4 floor(f 2^30) >= 2^32 with neighbours from a table search."""
    x = torch.cat([_probe_values(fmt, 3000), torch.tensor([MAX[fmt] * 3, -MAX[fmt] * 3, 0.0, -0.0])])
    rb = flat_rbits(11, x.numel())
    got = ref.round_to_format(x, fmt, "sr", rb).double()
    want = sr_expected(x, fmt, rb)
    bad = got != want
    assert not bad.any(), f"{fmt}: x={x[bad][0].item()!r} got {got[bad][0].item()!r} want {want[bad][0].item()!r}"
    assert torch.equal(torch.signbit(got), torch.signbit(x))


@pytest.mark.parametrize("fmt", FMTS)
def test_sr_unbiased_and_only_neighbours(fmt):
    x = _probe_values(fmt, 60, seed=1)
    x = x[x.abs() <= MAX[fmt]]
    N = 4000
    xs = x.repeat(N)                               # N draws of every value, distinct counters
    y = ref.round_to_format(xs, fmt, "sr", flat_rbits(123, xs.numel())).double().reshape(N, -1)
    v = nonneg_values(fmt)
    ax = x.double().abs()
    hi_i = torch.searchsorted(v, ax)
    b = v[hi_i]
    a = torch.where(b == ax, b, v[(hi_i - 1).clamp(min=0)])
    s = torch.where(torch.signbit(x), -1.0, 1.0).double()
    hits_a = y == (a * s)[None]
    hits_b = y == (b * s)[None]
    assert (hits_a | hits_b).all(), f"{fmt}: SR produced a value that is not a neighbour"
    p = torch.where(b > a, (ax - a) / (b - a).clamp(min=1e-300), torch.zeros_like(ax))
    se = (b - a) * torch.sqrt(p * (1 - p) / N)
    err = (y.mean(0) - x.double()).abs()
    ok = torch.where(se > 0, err <= 4 * se + 1e-12 * ax, err == 0)
    assert ok.all(), f"{fmt}: biased at x={x[~ok][0].item()!r}: err {err[~ok][0].item()} se {se[~ok][0].item()}"
    both = (p > 0.05) & (p < 0.95)
    assert hits_b[:, both].any(0).all() and hits_a[:, both].any(0).all()


def test_sr_pooled_unbiased_over_one_ulp():
    """x = 1 + k/64 ulp for k = 0..63 in e4m3: the mean over 20000 draws each is within 4 SE."""
    k = torch.arange(64, dtype=torch.float64)
    x = (1.0 + k / 64 * 0.125).float()
    N = 20000
    y = ref.round_to_format(x.repeat(N), "e4m3", "sr", flat_rbits(5, 64 * N)).double().reshape(N, 64)
    p = k / 64
    se = 0.125 * torch.sqrt(p * (1 - p) / N)
    assert ((y.mean(0) - x.double()).abs() <= 4 * se + 1e-15).all()


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3", "e5m2", "nvfp4"])
def test_sr_reproducible_and_seed_dependent(fmt):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, 32, generator=g) * 3
    a = quantize(x, fmt, "sr", seed=17)
    b = quantize(x, fmt, "sr", seed=17)
    c = quantize(x, fmt, "sr", seed=18)
    assert torch.equal(a.data, b.data)
    assert not torch.equal(a.data, c.data)
    r = quantize(x, fmt, "rne")
    if fmt == "nvfp4":
        assert torch.equal(a.scales, r.scales) and torch.equal(a.s_enc, r.s_enc)   # scales stay RNE


def test_nvfp4_sr_unbiased():
    """One block repeated over many leading indices (same scales, independent bits): mean -> x."""
    g = torch.Generator().manual_seed(9)
    x0 = torch.randn(1, 16, generator=g) * 2
    N = 4000
    x = x0.expand(N, 1, 16).contiguous()
    y = fake_quantize(x, "nvfp4", "sr", seed=4, backend="torch").double()
    codes, sbits, s_enc = ref.nvfp4_quantize(x0[None])
    s_b = ref.decode_bits(sbits.to(torch.int64), "e4m3").double()[0, 0, 0]
    step = torch.full((16,), 0.5, dtype=torch.float64)
    q_abs = (x0[0].double() * s_enc.double() / s_b).abs()
    step = torch.where(q_abs >= 2, 1.0, step)
    step = torch.where(q_abs >= 4, 2.0, step)
    unit = step * s_b / s_enc.double()
    p = ((q_abs % step) / step).clamp(0, 1)
    se = unit * torch.sqrt(p * (1 - p) / N)
    err = (y.mean(0)[0] - x0[0].double()).abs()
    assert (err <= 4 * se + 1e-6 * x0[0].double().abs()).all(), (err, se)
    assert y.std(0).max() > 0


def test_philox_known_answers():
    # Random123 known-answer vectors for philox4x32-10 (all four output words)
    assert [w.item() for w in philox4x32(0, 0, 0, 0, 0)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert [w.item() for w in philox4x32(0x299F31D0A4093822, 0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344)] \
        == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]
    assert philox_uint32(0, 0, 0, 0, 0).item() == 0x6627E8D5
    # eight elements per call, 16 bits each: element 8j + 2w + h = half h of word w of call j, in the top half
    words = torch.stack(philox4x32(5, torch.arange(3), 0, 0, 0), -1)          # [3, 4]
    halves = torch.stack((words & 0xFFFF, words >> 16), -1).reshape(-1)      # [24]
    assert torch.equal(flat_rbits(5, 19), (halves << 16)[:19])
    r = flat_rbits(1, 1 << 16)
    assert r.min() >= 0 and r.max() < 2 ** 32 and bool(((r & 0xFFFF) == 0).all())
    counts = torch.bincount((r >> 16).view(-1), minlength=1 << 16).double()
    assert (counts > 0).sum() > 40000     # 2**16 draws of 2**16 values: ~41400 distinct if uniform
    assert abs(r.double().mean().item() / 2 ** 32 - 0.5) < 0.01
    with pytest.raises(ValueError, match="seed"):
        philox_uint32(-1, 0)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3", "e5m2", "e2m1"])
def test_sr_sixteen_random_bits_bias_below_two_to_minus_16(fmt):
    """Every 16-bit random value once (the bits the kernels draw, :func:`grouped_rbits`): the mean of the
    rounded values is x minus at most 2**-16 of the gap between x's neighbours (truncated probabilities),
    never above x in magnitude."""
    x = _probe_values(fmt, 40, seed=7)
    x = x[(x.abs() <= MAX[fmt]) & (x != 0)]
    rb = (torch.arange(1 << 16, dtype=torch.int64) << 16)[:, None].expand(-1, x.numel())
    y = ref.round_to_format(x[None].expand(1 << 16, -1).contiguous(), fmt, "sr", rb.contiguous()).double()
    v = nonneg_values(fmt)
    ax = x.double().abs()
    hi_i = torch.searchsorted(v, ax)
    gap = v[hi_i] - torch.where(v[hi_i] == ax, v[hi_i], v[(hi_i - 1).clamp(min=0)])
    short = ax - y.mean(0).abs()                    # how far the mean falls short of |x|
    assert (short >= 0).all() and (short <= gap * 2.0 ** -16 + 1e-300).all(), (fmt, short.max().item())
