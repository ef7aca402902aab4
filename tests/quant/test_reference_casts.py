"""quant/reference.py element formats against torch's own casts, bit for bit.

Every float32 pattern of a strided sweep over each format's whole range (and
beyond, to inf), every tie point (midpoints and values 1-2 fp32 ulp either
side), the underflow and saturation edges, and random bit patterns (NaNs).
torch's CPU casts are correct RNE; we clamp to +-max first (saturation).
"""

import pytest
import torch

from replayssm_quant.quant import reference as ref

from _formats_oracle import MAX, NAN_BITS, NBITS, TORCH_DTYPE, nonneg_values, tie_points, torch_cast_bits

FMTS = ["bf16", "fp16", "e4m3", "e5m2"]


def _sweep(fmt, n=1 << 20, seed=0):
    """n float32 patterns strided over [0, bits(2*max)] with a random offset in each stride, +inf; both signs."""
    hi = int(torch.tensor(min(MAX[fmt] * 2, 3.4028234663852886e38), dtype=torch.float32).view(torch.int32))
    stride = max(hi // n, 1)
    g = torch.Generator().manual_seed(seed)
    pats = torch.arange(0, hi, stride, dtype=torch.int64)
    pats = (pats + torch.randint(0, stride, pats.shape, generator=g)).clamp(max=0x7F800000)
    x = pats.to(torch.int32).view(torch.float32)
    return torch.cat([x, -x])


def _check_bits(x, fmt):
    got = ref.encode_bits(x, fmt).to(torch.int64)
    nan = torch.isnan(x)
    want = torch_cast_bits(x[~nan], fmt)
    bad = (got[~nan] != want).nonzero().flatten()
    assert bad.numel() == 0, (
        f"{fmt}: {bad.numel()} mismatches vs torch, e.g. x={x[~nan][bad[0]].item()!r} "
        f"got {got[~nan][bad[0]].item():#x} want {want[bad[0]].item():#x}")
    sign = torch.signbit(x[nan]).to(torch.int64) << (NBITS[fmt] - 1)
    assert torch.equal(got[nan], NAN_BITS[fmt] | sign), f"{fmt}: NaN must give the NaN code with its sign"


@pytest.mark.parametrize("fmt", FMTS)
def test_dense_sweep_matches_torch(fmt):
    _check_bits(_sweep(fmt), fmt)


@pytest.mark.parametrize("fmt", FMTS)
def test_every_tie_point_matches_torch(fmt):
    x = tie_points(fmt)
    _check_bits(x, fmt)
    # the tie set really holds ties: half of the midpoints must round down, half up
    v = nonneg_values(fmt)
    mids = ((v[1:] + v[:-1]) / 2).float()
    down = ref.decode_bits(ref.encode_bits(mids, fmt), fmt).double() == v[:-1]
    assert 0.3 < down.double().mean().item() < 0.7


def test_bf16_every_high_half_with_tie_low_halves():
    hi = torch.arange(0, 1 << 16, dtype=torch.int64) << 16
    lows = torch.tensor([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234, 0xC000])
    pats = (hi[:, None] | lows[None, :]).flatten()
    x = (pats - ((pats >> 31) << 32)).to(torch.int32).view(torch.float32)   # all signs, inf, NaN patterns
    _check_bits(x, "bf16")


@pytest.mark.parametrize("fmt", FMTS)
def test_random_bit_patterns_match_torch(fmt):
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-2 ** 31, 2 ** 31, (1 << 18,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    assert torch.isnan(x).any()
    _check_bits(x, fmt)


@pytest.mark.parametrize("fmt", FMTS)
def test_decode_every_pattern_matches_torch(fmt):
    n = NBITS[fmt]
    pats = torch.arange(0, 1 << n, dtype=torch.int64)
    got = ref.decode_bits(pats, fmt)
    want = pats.to(torch.int16 if n == 16 else torch.uint8).view(TORCH_DTYPE[fmt]).float()
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))


@pytest.mark.parametrize("fmt", FMTS)
def test_semantics(fmt):
    mx = MAX[fmt]
    x = torch.tensor([-0.0, 0.0, float("inf"), -float("inf"), mx * 1.5, -mx * 1.5, 3.4028234663852886e38])
    y = ref.round_to_format(x, fmt)
    assert torch.equal(torch.signbit(y[:2]), torch.tensor([True, False])) and (y[:2] == 0).all()
    assert y[2:].tolist() == [mx, -mx, mx, -mx, mx]        # saturate, never inf
    sub = nonneg_values(fmt)[1:6].float()                   # smallest subnormals are exact
    assert torch.equal(ref.round_to_format(sub, fmt), sub)
    tiny = torch.tensor([-1e-45])
    assert ref.round_to_format(tiny, fmt).item() == 0 and torch.signbit(ref.round_to_format(tiny, fmt)).item()


def test_e2m1_elements_nearest_even():
    from _formats_oracle import E2M1
    x = torch.linspace(-7, 7, 20001, dtype=torch.float32)
    x = torch.cat([x, (E2M1[1:] + E2M1[:-1]).float() / 2])
    got = ref.round_to_format(x, "e2m1").double()
    d = (x.double().abs()[:, None].clamp(max=6) - E2M1[None, :]).abs()
    best = d.min(dim=1, keepdim=True).values
    cand = (d == best) & ((torch.arange(8) % 2 == 0) | ((d == best).sum(1, keepdim=True) == 1))
    idx = cand.to(torch.int64).argmax(dim=1)
    want = E2M1[idx] * torch.where(torch.signbit(x), -1.0, 1.0).double()
    assert torch.equal(got, want)


def test_bad_arguments():
    x = torch.ones(3)
    with pytest.raises(ValueError, match="float32"):
        ref.encode_bits(x.double(), "e4m3")
    with pytest.raises(ValueError, match="unknown rounding"):
        ref.encode_bits(x, "e4m3", "nearest")
    with pytest.raises(ValueError, match="needs rbits"):
        ref.encode_bits(x, "e4m3", "sr")
    with pytest.raises(ValueError, match="shape"):
        ref.encode_bits(x, "e4m3", "sr", torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="nvfp4"):
        ref.encode_bits(x, "nvfp4")
    with pytest.raises(ValueError, match="unknown format"):
        ref.encode_bits(x, "fp7")
