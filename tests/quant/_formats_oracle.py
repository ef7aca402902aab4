"""Independent float64 helpers for the format tests (no code shared with quant/reference.py)."""

import torch

TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MAX = {"bf16": 3.3895313892515355e38, "fp16": 65504.0, "e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}
NAN_BITS = {"bf16": 0x7FC0, "fp16": 0x7E00, "e4m3": 0x7F, "e5m2": 0x7F}
NBITS = {"bf16": 16, "fp16": 16, "e4m3": 8, "e5m2": 8, "e2m1": 4}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def torch_cast_bits(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """torch's own RNE cast after clamping to +-max: bit patterns as int64 (unsigned)."""
    y = x.clamp(-MAX[fmt], MAX[fmt]).to(TORCH_DTYPE[fmt])
    v = y.view(torch.int16 if NBITS[fmt] == 16 else torch.uint8).to(torch.int64)
    return v & ((1 << NBITS[fmt]) - 1)


def nonneg_values(fmt: str) -> torch.Tensor:
    """All finite non-negative values of a format (float64, ascending), via torch's own decode."""
    if fmt == "e2m1":
        return E2M1.clone()
    n = NBITS[fmt]
    pats = torch.arange(0, 1 << (n - 1), dtype=torch.int64)
    dt = torch.int16 if n == 16 else torch.uint8
    v = pats.to(dt).view(TORCH_DTYPE[fmt]).to(torch.float64)
    return v[torch.isfinite(v)].sort().values


def tie_points(fmt: str) -> torch.Tensor:
    """float32: every representable value, every midpoint, and fp32 values 1-2 ulp either side,
    the underflow tie below the smallest subnormal, the saturation edges; both signs."""
    v = nonneg_values(fmt)
    mids = (v[1:] + v[:-1]) / 2
    top = v[-1] + (v[-1] - v[-2])           # the would-be next value above max
    extra = torch.tensor([v[1] / 2, v[1] / 4, v[1] * 0.75, (v[-1] + top) / 2, top, top * 2,
                          3.4028234663852886e38, float("inf")], dtype=torch.float64)
    base = torch.cat([v, mids, extra]).float()
    up, down = torch.full_like(base, float("inf")), torch.zeros_like(base)
    n1u, n1d = torch.nextafter(base, up), torch.nextafter(base, down)
    out = torch.cat([base, n1u, n1d, torch.nextafter(n1u, up), torch.nextafter(n1d, down)])
    return torch.cat([out, -out])


def sr_expected(x: torch.Tensor, fmt: str, rbits: torch.Tensor) -> torch.Tensor:
    """Stochastic rounding from the definition: neighbours a <= |x| <= b by table search in
    float64, f = (|x| - a) / (b - a), round up iff r + 4 floor(f 2**30) >= 2**32; |x| > max -> max.
    Returns float64 values (x finite)."""
    v = nonneg_values(fmt)
    ax = x.double().abs()
    sat = ax >= v[-1]
    axc = ax.clamp(max=v[-1].item())
    hi_i = torch.searchsorted(v, axc, right=False)          # first v >= |x|
    b = v[hi_i]
    a = v[(hi_i - 1).clamp(min=0)]
    exact = b == axc
    a = torch.where(exact, b, a)
    f = torch.where(exact, torch.zeros_like(axc), (axc - a) / torch.where(exact, torch.ones_like(b), b - a))
    up = (rbits.to(torch.int64) + 4 * torch.floor(f * 2.0 ** 30).to(torch.int64)) >= 2 ** 32
    mag = torch.where(up, b, a)
    mag = torch.where(sat, v[-1], mag)
    sign = torch.signbit(x)
    return torch.where(sign, -mag, mag)
