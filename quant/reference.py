"""Reference quantizers in torch, all rounding done in integer bit arithmetic.

These are the readable ground truth the Triton kernels (``kernels/rounding.py``)
must match bit for bit. Every function works on any device; the arithmetic is
int64 on the fp32 bit patterns, so there are no float-cast corner cases.

Semantics (all element formats):

* round to nearest, ties to even (``rounding="rne"``), or stochastic
  (``"sr"``): the magnitude goes to one of its two neighbours ``a <= |x| <= b``
  with P(b) = (|x| - a) / (b - a). The random word ``r`` (uint32, from Philox)
  is aligned below the kept mantissa: with ``s`` discarded bits (``s <= 30``)
  the top ``s`` random bits are added to the discarded bits and the sum is
  truncated, so P(b) is exactly the discarded fraction. For ``s > 30`` (inputs
  far below the smallest subnormal) the discarded field is first truncated to
  30 bits. Equivalently, for every format: round up iff
  ``r + 4 * floor(f * 2**30) >= 2**32`` with ``f = (|x| - a) / (b - a)``
  (at least 30 random bits; P(b) = floor(f * 2**30) / 2**30).
* saturating: any finite value, and +-inf, beyond the largest finite value
  becomes +-max finite (never inf from overflow).
* NaN stays NaN (canonical code with the input's sign: bf16 0x7FC0, fp16
  0x7E00, e4m3 0x7F, e5m2 0x7F; payloads are not kept).
* signed zero kept; negative values that round to zero give -0.
* subnormals exact (the spacing below the smallest normal is constant).

NVFP4 (DESIGN.md sec. 4) over the last two dims ``[..., R, C]``, C % 16 == 0:

* non-finite handling first: +-inf is treated as +-FLT_MAX (saturation);
  NaN elements are ignored for the amaxes. A block (16 elements) holding any
  NaN gets the E4M3 NaN code (0x7F) as its scale and zero codes, so the
  *whole block* decodes to NaN (nvfp4 has no NaN element code; the NaN stays
  visible instead of silently becoming a number).
* amax = max |x| over the last two dims; s_enc = fp32(2688 / amax), capped at
  FLT_MAX; s_enc = 1 when amax is 0 (so an all-zero tensor gives zeros).
* xs = fp32(x * s_enc); block decode scale s_b = E4M3_rne(fp32(max_block|xs| / 6))
  (saturating at 448; ``max_block|xs|`` equals fp32(block_amax * s_enc) since
  rounding is monotone).
* code q = E2M1(fp32(xs / s_b)) (RNE or SR, saturating at +-6); if s_b == 0
  the block's codes are 0 (+0 or -0 by the sign of x).
* value = fp32(q * d) with the per-block decode factor d = fp32(s_b / s_enc)
  (DESIGN.md's q * s_b / s_enc, rounded in this order: one IEEE division per
  16-element block and one multiply per element, so the kernels decode with a
  4-bit-to-fp32 bit formula and a multiply; ``q * d`` is exact for q in
  {0, 0.5, 1, 2, 4} unless the result is an fp32 subnormal, and within 1 ulp of
  the once-rounded q * s_b / s_enc otherwise). Every NaN value (a NaN block, or
  a NaN from a bad user-supplied s_enc) is stored as the canonical quiet NaN
  0x7FC00000 (:func:`canonical_nan`), because the NaN bits that float arithmetic
  returns differ between CPUs and GPUs.
* storage: codes uint8 ``[..., R, C/2]`` (element 2i low nibble, 2i+1 high),
  scale_bits uint8 ``[..., R, C/16]`` (E4M3 bits), s_enc float32 ``[...]``.

Row-scaled ``fp8`` and ``int8`` (DESIGN.md sec. 4) over the last dim (a row = ``x[..., r, :]``),
with M = 448 (fp8) or 127 (int8), in this exact order (the Triton kernels do the same):

* xc = x with +-inf replaced by +-FLT_MAX (NaN kept); amax = max |xc| over the row with NaN
  ignored (:func:`rowscaled_amax`).
* decode scale d = min(fp32(amax / M), D_MAX) (one IEEE division per row; D_MAX = the largest fp32
  with fp32(M * D_MAX) finite: fp32(FLT_MAX / 448) for fp8, 0x7C010203 for int8, so no code decodes
  to inf), encode factor r = min(fp32(M / amax), FLT_MAX) (a second division per row: the elements are
  *multiplied*, never divided); d = r = 1 when amax is 0 (:func:`rowscaled_scales`).
* xs = fp32(xc * r) (|xs| <= M up to one ulp).
* fp8: code = E4M3FN bits of xs (:func:`encode_bits` ``e4m3``: RNE or SR, saturating at 448, NaN ->
  0x7F with the sign, signed zero kept). int8: |xs| rounded to an integer by the same integer bit
  arithmetic (RNE, or SR with the random word aligned below the units bit: P(up) = the fraction to
  2**-16 for 16-bit random words), clamped to 127, the sign applied in two's complement (a negative
  value that rounds to 0 gives +0); NaN -> -128 (the one unused code).
* value = fp32(q * d), q the code's value (E4M3 value or the integer); NaN codes give the canonical
  NaN 0x7FC00000. A row with amax below M * 2**-150 has d = 0 and decodes to zeros (d is an fp32
  subnormal, with fewer significant bits, below M * 2**-126).
* storage: codes ``[..., R, C]`` (fp8: uint8 E4M3 bits; int8: int8), d float32 ``[..., R]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .formats import NVFP4_BLOCK, FormatInfo, get_format

FLT_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class BitSpec:
    """Bit-level layout of an element format (sign + exp + mantissa)."""

    nbits: int       # total bits including sign
    exp_bits: int
    man_bits: int
    bias: int
    max_bits: int    # magnitude bit pattern of the largest finite value
    nan_bits: int    # magnitude bit pattern of the canonical NaN (-1: no NaN)
    has_inf: bool

    @property
    def emin(self) -> int:
        return 1 - self.bias


#: Bit layouts; keys are format names (``e2m1`` is the NVFP4 element).
BITSPECS: dict[str, BitSpec] = {
    "bf16": BitSpec(16, 8, 7, 127, 0x7F7F, 0x7FC0, True),
    "fp16": BitSpec(16, 5, 10, 15, 0x7BFF, 0x7E00, True),
    "e4m3": BitSpec(8, 4, 3, 7, 0x7E, 0x7F, False),
    "e5m2": BitSpec(8, 5, 2, 15, 0x7B, 0x7F, True),
    "e2m1": BitSpec(4, 2, 1, 1, 0x7, -1, False),
}

ROUNDINGS = ("rne", "sr")
#: the largest shift (discarded bits) handled exactly; see the module docstring.
MAX_SHIFT = 30


def _name(fmt) -> str:
    if isinstance(fmt, FormatInfo):
        return fmt.name
    if isinstance(fmt, str) and fmt.lower() == "e2m1":
        return "e2m1"
    return get_format(fmt).name


def _bitspec(fmt) -> BitSpec:
    name = _name(fmt)
    if name not in BITSPECS:
        raise ValueError(
            f"format {name!r} has no element bit pattern here; element formats: "
            f"fp32, {', '.join(BITSPECS)} (nvfp4 is blocked: use nvfp4_quantize; fp8 and int8 are row-scaled: "
            "use rowscaled_quantize, or e4m3 for the raw E4M3 cast)"
        )
    return BITSPECS[name]


def check_rounding(rounding: str) -> str:
    if rounding not in ROUNDINGS:
        raise ValueError(f"unknown rounding {rounding!r}; valid: 'rne' (nearest even) or 'sr' (stochastic)")
    return rounding


def _check_float32(x: torch.Tensor, what: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise ValueError(f"{what} must be float32, got {x.dtype} (convert with .float() first)")


def _check_rbits(rbits, x: torch.Tensor, rounding: str):
    if rounding == "rne":
        return None
    if rbits is None:
        raise ValueError("rounding='sr' needs rbits (uint32 values, e.g. from quant.philox.philox_uint32)")
    if not isinstance(rbits, torch.Tensor) or rbits.dtype.is_floating_point:
        raise ValueError("rbits must be an integer tensor of uint32 values")
    if rbits.shape != x.shape:
        raise ValueError(f"rbits shape {tuple(rbits.shape)} must equal x shape {tuple(x.shape)}")
    return rbits.to(torch.int64) & 0xFFFFFFFF


def _f32_bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _encode_spec(x: torch.Tensor, bs: BitSpec, rbits: torch.Tensor | None) -> torch.Tensor:
    """fp32 -> magnitude|sign bit pattern (int64) for one BitSpec; RNE if rbits is None."""
    u = _f32_bits(x)
    sign = u >> 31
    a = u & 0x7FFFFFFF
    e32 = a >> 23
    mant = (a & 0x7FFFFF) | torch.where(e32 > 0, 0x800000, 0)
    e = torch.clamp(e32, min=1) - 127                       # fp32 subnormals: exponent -126
    shift = (23 - bs.man_bits) + torch.clamp(bs.emin - e, min=0)
    pre = torch.clamp(shift - MAX_SHIFT, min=0, max=24)     # deep underflow: truncate to 30 discarded bits
    mant = mant >> pre
    shift = torch.clamp(shift, max=MAX_SHIFT)
    n = mant >> shift
    rem = mant & ((1 << shift) - 1)
    if rbits is None:
        half = 1 << (shift - 1)
        up = (rem > half) | ((rem == half) & ((n & 1) == 1))
    else:
        up = (rem + (rbits >> (32 - shift))) >= (1 << shift)
    n = n + up.to(torch.int64)
    mag = (torch.clamp(e - bs.emin, min=0) << bs.man_bits) + n
    mag = torch.clamp(mag, max=bs.max_bits)                  # saturate (also +-inf)
    if bs.nan_bits >= 0:
        mag = torch.where(a > 0x7F800000, bs.nan_bits, mag)
    return mag | (sign << (bs.nbits - 1))


def encode_bits(x: torch.Tensor, fmt, rounding: str = "rne", rbits: torch.Tensor | None = None) -> torch.Tensor:
    """Round fp32 values into a format's bit patterns.

    Args:
        x: float32 tensor, any shape.
        fmt: ``fp32``, ``bf16``, ``fp16``, ``e4m3``, ``e5m2`` or ``e2m1`` (name or FormatInfo).
        rounding: ``"rne"`` or ``"sr"``.
        rbits: for ``"sr"``: integer tensor of uint32 values, same shape as ``x``.

    Returns:
        int32 tensor, same shape: the bit pattern in the low 32/16/8/4 bits
        (unsigned, e.g. e4m3 values in [0, 255]; fp32 gives the raw int32 view).
    """
    _check_float32(x)
    check_rounding(rounding)
    if _name(fmt) == "fp32":
        return x.contiguous().view(torch.int32).clone()
    bs = _bitspec(fmt)
    rb = _check_rbits(rbits, x, rounding)
    return _encode_spec(x, bs, rb).to(torch.int32)


def decode_bits(bits: torch.Tensor, fmt) -> torch.Tensor:
    """Exact decode of bit patterns (as produced by :func:`encode_bits`) to float32.

    Args:
        bits: integer tensor (int32/int64/int16/uint8...), the pattern in the low bits.
        fmt: format name as for :func:`encode_bits`.

    Returns:
        float32 tensor, same shape.
    """
    if not isinstance(bits, torch.Tensor) or bits.dtype.is_floating_point:
        raise ValueError("bits must be an integer tensor")
    if _name(fmt) == "fp32":
        return bits.to(torch.int32).contiguous().view(torch.float32).clone()
    bs = _bitspec(fmt)
    b = bits.to(torch.int64) & ((1 << bs.nbits) - 1)
    sign = b >> (bs.nbits - 1)
    mag = b & ((1 << (bs.nbits - 1)) - 1)
    E = mag >> bs.man_bits
    m = mag & ((1 << bs.man_bits) - 1)
    normal = ((E - bs.bias + 127) << 23) | (m << (23 - bs.man_bits))
    if bs.has_inf:
        normal = torch.where(E == (1 << bs.exp_bits) - 1, 0x7F800000 | (m << (23 - bs.man_bits)), normal)
    elif bs.nan_bits >= 0:
        normal = torch.where(mag == bs.nan_bits, 0x7FC00000, normal)
    sub = (m.to(torch.float64) * 2.0 ** (bs.emin - bs.man_bits)).to(torch.float32)   # exact
    sub_bits = sub.view(torch.int32).to(torch.int64)
    out = (torch.where(E == 0, sub_bits, normal) & 0x7FFFFFFF) - (sign << 31)   # int32 range, sign bit set
    return out.to(torch.int32).view(torch.float32)


# ----------------------------------------------------------------------------- NVFP4


def _check_nvfp4_shape(x: torch.Tensor) -> None:
    if x.dim() < 2:
        raise ValueError(f"nvfp4 needs a tensor [..., R, C] with at least 2 dims, got shape {tuple(x.shape)}")
    if x.shape[-1] % NVFP4_BLOCK != 0 or x.shape[-1] == 0:
        raise ValueError(
            f"nvfp4 needs the last dim C to be a positive multiple of {NVFP4_BLOCK} "
            f"(16-element blocks along C), got shape {tuple(x.shape)}"
        )


def nvfp4_amax(x: torch.Tensor) -> torch.Tensor:
    """amax over the last two dims, NaN ignored, inf counted as FLT_MAX. [..., R, C] -> float32 [...]."""
    ax = torch.where(torch.isnan(x), 0.0, x.abs()).clamp(max=FLT_MAX)
    if ax.shape[-2] * ax.shape[-1] == 0:        # no elements: amax 0 (s_enc 1), as the kernels give
        return ax.new_zeros(ax.shape[:-2])
    return ax.amax(dim=(-2, -1))


def nvfp4_encode_scale(amax: torch.Tensor) -> torch.Tensor:
    """s_enc = fp32(2688 / amax), capped at FLT_MAX; 1 where amax == 0. float32 -> float32."""
    s = torch.full_like(amax, 448.0 * 6.0) / amax       # tensor / tensor (a Python scalar numerator: reciprocal * x)
    s = torch.clamp(s, max=FLT_MAX)
    return torch.where(amax == 0, torch.ones_like(s), s)


def nvfp4_quantize(x: torch.Tensor, rounding: str = "rne", rbits: torch.Tensor | None = None):
    """Quantize ``x [..., R, C]`` to NVFP4 (see the module docstring for the exact arithmetic).

    Args:
        x: float32 ``[..., R, C]``, C a multiple of 16.
        rounding: ``"rne"`` or ``"sr"`` (SR applies to the element codes; block scales are RNE).
        rbits: for ``"sr"``: uint32 values (integer tensor) shaped like ``x``.

    Returns:
        codes uint8 ``[..., R, C//2]``, scale_bits uint8 ``[..., R, C//16]``, s_enc float32 ``[...]``.
    """
    _check_float32(x)
    check_rounding(rounding)
    _check_nvfp4_shape(x)
    rb = _check_rbits(rbits, x, rounding)
    *lead, R, C = x.shape
    nan = torch.isnan(x)
    xf = torch.where(nan, 0.0, x).clamp(-FLT_MAX, FLT_MAX)
    s_enc = nvfp4_encode_scale(nvfp4_amax(x))
    xs = xf * s_enc[..., None, None]
    blocks = xs.reshape(*lead, R, C // NVFP4_BLOCK, NVFP4_BLOCK)
    bmax = blocks.abs().amax(dim=-1)
    sbits = _encode_spec(bmax / 6.0, BITSPECS["e4m3"], None)          # E4M3, RNE, saturating
    s_b = decode_bits(sbits, "e4m3")
    bnan = nan.reshape(blocks.shape).any(dim=-1)
    s_b_full = s_b[..., None].expand(blocks.shape).reshape(x.shape)
    q_in = torch.where(s_b_full == 0, xs * 0.0, xs / s_b_full)         # 0 * xs keeps the sign
    qb = _encode_spec(q_in, BITSPECS["e2m1"], rb)
    qb = torch.where(bnan[..., None].expand(blocks.shape).reshape(x.shape), 0, qb)
    sbits = torch.where(bnan, BITSPECS["e4m3"].nan_bits, sbits)
    qb = qb.reshape(*lead, R, C // 2, 2)
    codes = (qb[..., 0] | (qb[..., 1] << 4)).to(torch.uint8)
    return codes, sbits.to(torch.uint8), s_enc


def nvfp4_parts(codes: torch.Tensor, scale_bits: torch.Tensor):
    """The values of NVFP4 parts without the second-level scale: uint8 codes ``[..., R, C//2]`` (element 2i in
    the low nibble) and scale bits ``[..., R, C//16]`` -> (E2M1 values float32 ``[..., R, C]``, E4M3 block scales
    s_b float32 ``[..., R, C//16]``)."""
    c = codes.to(torch.int64)
    q = decode_bits(torch.stack((c & 0xF, c >> 4), dim=-1).reshape(*codes.shape[:-1], 2 * codes.shape[-1]), "e2m1")
    return q, decode_bits(scale_bits, "e4m3")


def nvfp4_dequantize(codes: torch.Tensor, scale_bits: torch.Tensor, s_enc: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`nvfp4_quantize`: uint8 ``[..., R, C//2]``, uint8 ``[..., R, C//16]``,
    float32 ``[...]`` -> float32 ``[..., R, C]`` with value = fp32(q * fp32(s_b / s_enc)) (NaN: 0x7FC00000)."""
    if codes.dtype != torch.uint8 or scale_bits.dtype != torch.uint8:
        raise ValueError(f"codes and scale_bits must be uint8, got {codes.dtype}, {scale_bits.dtype}")
    *lead, R, C2 = codes.shape
    C = 2 * C2
    if tuple(scale_bits.shape) != (*lead, R, C // NVFP4_BLOCK) or C % NVFP4_BLOCK:
        raise ValueError(f"scale_bits shape {tuple(scale_bits.shape)} does not match codes {tuple(codes.shape)}")
    if tuple(s_enc.shape) != tuple(lead):
        raise ValueError(f"s_enc shape {tuple(s_enc.shape)} must be the leading dims {tuple(lead)}")
    q, s_b = nvfp4_parts(codes, scale_bits)
    d = s_b / s_enc.to(torch.float32)[..., None, None]                                 # fp32(s_b / s_enc)
    d = d[..., None].expand(*lead, R, C // NVFP4_BLOCK, NVFP4_BLOCK).reshape(*lead, R, C)
    return canonical_nan(q * d)


def canonical_nan(v: torch.Tensor) -> torch.Tensor:
    """float32 -> float32 with every NaN replaced by the canonical quiet NaN 0x7FC00000.

    Arithmetic on a NaN returns a device-dependent NaN (x86 keeps the operand's
    payload and sign, NVIDIA GPUs return 0x7FFFFFFF), so NaN results are made
    canonical on the bits wherever a kernel must match this reference bit for bit.
    """
    b = v.contiguous().view(torch.int32)
    b = torch.where((b & 0x7FFFFFFF) > 0x7F800000, 0x7FC00000, b)   # a Python scalar: no host-to-device copy
    return b.view(torch.float32)


# ----------------------------------------------------------------------------- row-scaled fp8 / int8

#: the code maximum M of each row-scaled format (d = amax / M)
ROW_MAX = {"fp8": 448.0, "int8": 127.0}
#: the largest decode scale: the largest fp32 D with fp32(M * D) finite (module docstring)
ROW_D_MAX = {"fp8": 7.595588094610019e+35, "int8": 2.6793883890187504e+36}
#: rounding of |xs| to an integer (int8's magnitude): a float layout whose subnormal spacing is 1 up to 128
INT8_MAGNITUDE = BitSpec(8, 8, 7, -6, 0x7F, -1, False)
#: the int8 code that stands for NaN
INT8_NAN = -128


def _rowscaled_name(fmt) -> str:
    name = _name(fmt)
    if name not in ROW_MAX:
        raise ValueError(f"format {name!r} is not row-scaled; row-scaled formats: {', '.join(ROW_MAX)}")
    return name


def rowscaled_amax(x: torch.Tensor) -> torch.Tensor:
    """max |x| over the last dim, NaN ignored, +-inf counted as FLT_MAX: float32 ``[..., C]`` -> ``[...]`` (0 for
    empty rows, C = 0)."""
    ax = torch.where(torch.isnan(x), 0.0, x.abs()).clamp(max=FLT_MAX)
    return ax.amax(dim=-1) if ax.shape[-1] else ax.new_zeros(ax.shape[:-1])


def rowscaled_scales(amax: torch.Tensor, fmt) -> tuple[torch.Tensor, torch.Tensor]:
    """(decode scale d, encode factor r) of rows with the given amax (float32, any shape); see the module docstring."""
    name = _rowscaled_name(fmt)
    m = torch.full_like(amax, ROW_MAX[name])       # tensor / tensor divisions (a GPU divides by a scalar as a product)
    zero = amax == 0
    safe = torch.where(zero, torch.ones_like(amax), amax)
    d = torch.clamp(safe / m, max=ROW_D_MAX[name])
    r = torch.clamp(m / safe, max=FLT_MAX)
    one = torch.ones_like(amax)
    return torch.where(zero, one, d), torch.where(zero, one, r)


def rowscaled_quantize(x: torch.Tensor, fmt, rounding: str = "rne", rbits: torch.Tensor | None = None):
    """Quantize ``x [..., C]`` to row-scaled ``fp8`` or ``int8`` (one scale per row of the last dim).

    Args:
        x: float32, at least one dim (a row = the last dim).
        fmt: ``"fp8"`` or ``"int8"``.
        rounding: ``"rne"`` or ``"sr"`` (the codes; the scale is always computed as in the module docstring).
        rbits: for ``"sr"``: uint32 values (integer tensor) shaped like ``x``.

    Returns:
        (codes ``[..., C]``: uint8 E4M3 bits (fp8) or int8, d float32 ``[...]``).
    """
    _check_float32(x)
    check_rounding(rounding)
    name = _rowscaled_name(fmt)
    if x.dim() < 1:
        raise ValueError(f"{name} is row-scaled: x needs at least one dim (a row = the last dim), got a scalar")
    rb = _check_rbits(rbits, x, rounding)
    d, r = rowscaled_scales(rowscaled_amax(x), name)
    xs = x.clamp(-FLT_MAX, FLT_MAX) * r[..., None]          # clamp keeps NaN
    if name == "fp8":
        return _encode_spec(xs, BITSPECS["e4m3"], rb).to(torch.uint8), d
    mag = _encode_spec(xs, INT8_MAGNITUDE, rb)              # sign in bit 7, magnitude 0..127
    code = torch.where((mag >> 7) == 1, -(mag & 0x7F), mag & 0x7F)
    return torch.where(torch.isnan(xs), INT8_NAN, code).to(torch.int8), d


def rowscaled_dequantize(codes: torch.Tensor, d: torch.Tensor, fmt) -> torch.Tensor:
    """Inverse of :func:`rowscaled_quantize`: codes ``[..., C]`` (uint8 fp8 / int8 int8), d float32 ``[...]``
    -> float32 ``[..., C]``, value = fp32(q * d), NaN as 0x7FC00000."""
    name = _rowscaled_name(fmt)
    want = torch.uint8 if name == "fp8" else torch.int8
    if not isinstance(codes, torch.Tensor) or codes.dtype != want:
        raise ValueError(f"{name} codes must be {want}, got {getattr(codes, 'dtype', type(codes).__name__)}")
    if not isinstance(d, torch.Tensor) or d.dtype != torch.float32 or tuple(d.shape) != tuple(codes.shape[:-1]):
        raise ValueError(f"{name} scales must be float32 of shape {tuple(codes.shape[:-1])} (one per row), got "
                         f"{getattr(d, 'dtype', None)} {tuple(getattr(d, 'shape', ()))}")
    return canonical_nan(rowscaled_values(codes, name) * d[..., None])


def rowscaled_values(codes: torch.Tensor, fmt) -> torch.Tensor:
    """The values q of row-scaled codes before their row's scale: uint8 E4M3 bits (``fp8``) or int8 (``int8``)
    ``[..., C]`` -> float32 ``[..., C]`` exactly (the NaN codes: NaN)."""
    if _rowscaled_name(fmt) == "fp8":
        return decode_bits(codes, "e4m3")
    c = codes.to(torch.int32)
    return torch.where(c == INT8_NAN, float("nan"), c.to(torch.float32))


def round_to_format(x: torch.Tensor, fmt, rounding: str = "rne", rbits: torch.Tensor | None = None) -> torch.Tensor:
    """Fake quantization: the float32 value ``x`` takes after a round trip through ``fmt``.

    Args:
        x: float32; for ``nvfp4`` shaped ``[..., R, C]`` (amax over the last two dims); for ``fp8`` and
            ``int8`` ``[..., C]`` (one scale per row of the last dim).
        fmt: any format of :data:`quant.formats.FORMATS` (or ``e2m1``).
        rounding, rbits: as for :func:`encode_bits`.

    Returns:
        float32 tensor shaped like ``x``.
    """
    name = _name(fmt)
    if name == "nvfp4":
        return nvfp4_dequantize(*nvfp4_quantize(x, rounding, rbits))
    if name in ROW_MAX:
        return rowscaled_dequantize(*rowscaled_quantize(x, name, rounding, rbits), name)
    if name == "fp32":
        _check_float32(x)
        check_rounding(rounding)
        return x.clone()
    return decode_bits(encode_bits(x, name, rounding, rbits), name)
