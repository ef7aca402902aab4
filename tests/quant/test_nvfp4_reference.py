"""quant/reference.py NVFP4 against an independent second reference written from DESIGN.md sec. 4.

The second reference works in float64 with explicit float32 roundings after
each DESIGN.md operation, takes E4M3 block scales from torch's own float8 cast,
and rounds elements by searching the table of the 8 E2M1 values (ties to the
even code). Stochastic rounding follows the definition in sr_expected.
"""

import pytest
import torch

from replayssm_quant.quant import reference as ref
from replayssm_quant.quant.philox import flat_rbits

from _formats_oracle import E2M1

FLT_MAX = 3.4028234663852886e38


def f32(t):
    """Round a float64 tensor to float32 (RNE, overflow -> inf) and back to float64."""
    return t.to(torch.float32).to(torch.float64)


def e2m1_index(v, rbits=None):
    """Table search: |v| (float64, <= 6 after clamping) -> index 0..7 (RNE: ties to even index; SR with rbits)."""
    a = v.abs().clamp(max=6.0)
    if rbits is None:
        d = (a[..., None] - E2M1).abs()
        best = d.min(dim=-1, keepdim=True).values
        is_best = d == best
        two = is_best.sum(-1, keepdim=True) > 1
        pick = is_best & (~two | (torch.arange(8) % 2 == 0))
        return pick.to(torch.int64).argmax(dim=-1)
    hi = torch.searchsorted(E2M1, a.contiguous())
    lo = (hi - 1).clamp(min=0)
    exact = E2M1[hi] == a
    lo = torch.where(exact, hi, lo)
    f = torch.where(exact, torch.zeros_like(a), (a - E2M1[lo]) / torch.where(exact, 1.0, E2M1[hi] - E2M1[lo]))
    up = rbits + 4 * torch.floor(f * 2.0 ** 30).to(torch.int64) >= 2 ** 32
    return torch.where(up, hi, lo)


def second_reference(x, rbits=None):
    """x float32 [L, R, C] -> dict(codes int64 [L, R, C] (sign<<3 | index), scale_bits, s_enc, value, nan_block)."""
    L, R, C = x.shape
    xd = x.double()
    nan = torch.isnan(xd)
    xd = torch.where(nan, 0.0, xd).clamp(-FLT_MAX, FLT_MAX)
    amax = xd.abs().reshape(L, -1).max(dim=1).values
    s_enc = f32(torch.tensor(2688.0, dtype=torch.float64) / torch.where(amax == 0, 1.0, amax))
    s_enc = torch.where(amax == 0, 1.0, s_enc.clamp(max=FLT_MAX))
    xs = f32(xd * s_enc[:, None, None])
    blk = xs.reshape(L, R, C // 16, 16)
    bmax = blk.abs().max(dim=-1).values
    s_b8 = f32(bmax / 6.0).float().clamp(max=448.0).to(torch.float8_e4m3fn)
    scale_bits = s_b8.view(torch.uint8).to(torch.int64)
    s_b = s_b8.to(torch.float64)
    s_full = s_b[..., None].expand(L, R, C // 16, 16).reshape(L, R, C)
    q_in = f32(xs / torch.where(s_full == 0, 1.0, s_full))
    idx = e2m1_index(q_in, rbits)
    idx = torch.where(s_full == 0, 0, idx)
    sign = torch.signbit(xs)
    value = f32(E2M1[idx] * f32(s_full / s_enc[:, None, None]))       # q * d, d = fp32(s_b / s_enc) per block
    value = torch.where(sign, -value, value)
    nan_block = nan.reshape(L, R, C // 16, 16).any(-1)
    return dict(codes=idx | (sign.to(torch.int64) << 3), scale_bits=scale_bits, s_enc=s_enc.float(),
                value=value.float(), nan_block=nan_block)


def planted(seed=0, L=6, R=5, C=48):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L, R, C, generator=g) * torch.logspace(-6, 6, L)[:, None, None].float()
    # L=0: amax 2688 -> s_enc = 1; block 1 amax 6 -> s_b = 1: every E2M1 tie; block 2 amax 12 -> s_b = 2
    x[0, 0, :16] = torch.tensor([2688.0, -2688.0, 0, -0.0, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6])
    x[0, 1, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5,
                                 -3.5, -5.0, 6.0, 5.9])
    x[0, 1, 16:32] = 2 * x[0, 1, :16]
    x[0, 2, :16] = 1e-3          # scale 1.7e-4 underflows E4M3 -> zero block
    x[0, 2, 16:32] = 1.2e-2      # scale in E4M3 subnormals
    x[0, 3, :16] = 0.0           # all-zero block
    x[0, 3, 16:32] = -0.0
    x[1] = 0.0                   # all-zero state -> s_enc = 1
    x[2, 0, 5] = float("inf")    # inf -> FLT_MAX
    x[2, 1, 7] = -float("inf")
    x[3, 2, 20] = float("nan")   # NaN -> whole block NaN
    x[4, 4, 47] = 3e38           # huge values
    x[5] *= 1e-44                # fp32 subnormal inputs, amax ~1e-38: s_enc capped at FLT_MAX
    return x


def _check(x, rounding="rne", seed=3):
    rb = flat_rbits(seed, x.numel()).reshape(x.shape) if rounding == "sr" else None
    codes, sbits, s_enc = ref.nvfp4_quantize(x, rounding, rb)
    want = second_reference(x, rb)
    nb = want["nan_block"]
    c = codes.to(torch.int64)
    got_codes = torch.stack([c & 0xF, c >> 4], dim=-1).reshape(x.shape)    # element 2i in the low nibble
    nbf = nb[..., None].expand(*nb.shape, 16).reshape(x.shape)
    assert torch.equal(s_enc.view(torch.int32), want["s_enc"].view(torch.int32))
    assert torch.equal(sbits.to(torch.int64)[~nb], want["scale_bits"][~nb])
    bad = (got_codes != want["codes"]) & ~nbf
    assert not bad.any(), f"{int(bad.sum())} code mismatches, first x={x[bad][0].item()!r}"
    y = ref.nvfp4_dequantize(codes, sbits, s_enc)
    assert torch.equal(y[~nbf].view(torch.int32), want["value"][~nbf].view(torch.int32))
    # documented NaN behaviour: NaN block -> E4M3 NaN scale, zero codes, decodes to NaN everywhere
    assert (sbits[nb] == 0x7F).all() and (got_codes[nbf] == 0).all() and torch.isnan(y[nbf]).all()
    assert not torch.isnan(y[~nbf]).any() and torch.isfinite(y).logical_or(nbf).all()
    return y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nvfp4_rne_matches_second_reference(seed):
    x = planted(seed)
    y = _check(x)
    expect_ties = torch.tensor([0, 1, 1, 2, 2, 4, 4, -0.0, -1, -1, -2, -2, -4, -4, 6, 6])
    assert torch.equal(y[0, 1, :16], expect_ties)
    assert torch.equal(y[0, 1, 16:32], 2 * expect_ties)
    assert (y[0, 2, :16] == 0).all() and (y[1] == 0).all() and torch.signbit(y[0, 3, 16:32]).all()
    assert y[2, 0, 5].item() == pytest.approx(FLT_MAX, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 5])
def test_nvfp4_sr_matches_second_reference(seed):
    _check(planted(seed + 10), "sr", seed)


def test_nvfp4_random_shapes_and_scales():
    g = torch.Generator().manual_seed(42)
    for shape in [(1, 16), (3, 2, 7, 32), (9, 64)]:
        mag = torch.exp(torch.randn(shape, generator=g) * 8)
        x = mag * torch.sign(torch.randn(shape, generator=g))
        x = x.reshape(-1, shape[-2], shape[-1])
        _check(x)
        _check(x, "sr", 9)


def test_nvfp4_errors():
    with pytest.raises(ValueError, match="multiple of 16"):
        ref.nvfp4_quantize(torch.ones(4, 24))
    with pytest.raises(ValueError, match="at least 2 dims"):
        ref.nvfp4_quantize(torch.ones(32))
    with pytest.raises(ValueError, match="float32"):
        ref.nvfp4_quantize(torch.ones(4, 16, dtype=torch.float64))
