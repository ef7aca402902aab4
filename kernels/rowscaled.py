"""Triton device functions for the row-scaled 8-bit formats ``fp8`` and ``int8`` (DESIGN.md sec. 4).

The exact arithmetic (one scale per row of the contiguous last dim, the order of the divisions and
multiplies, saturation, NaN, int8's NaN code) is pinned in the docstring of
:mod:`replayssm_quant.quant.reference` (section "Row-scaled fp8 and int8"); these functions give the
same bits as its ``rowscaled_quantize`` / ``rowscaled_dequantize`` on the GPU and in the interpreter
(every division is ``tl.math.div_rn``; the element rounding is the integer bit arithmetic of
:mod:`.rounding`, or for fp8 RNE on the GPU its hardware cast, which gives the same bits).

Public (all ``@triton.jit``; ``FMT`` the constexpr format code ``fcode.FP8`` or ``fcode.INT8`` of
:mod:`replayssm_quant.quant.format_codes`):

* ``is_rowscaled(FMT)`` (a ``triton.constexpr_function``): whether ``FMT`` is ``fcode.FP8`` or ``fcode.INT8``.
* ``row_amax(x [R, C])`` -> fp32 ``[R]``: max |x| per row, NaN ignored, +-inf as FLT_MAX (pad with 0).
* ``row_scales(amax [R], FMT)`` -> (d, r) fp32 ``[R]``: decode scale and encode factor.
* ``row_encode(x [R, C], FMT, SR, rbits)`` -> (codes int32 ``[R, C]``, d fp32 ``[R]``): fp8 codes are the
  E4M3 bit patterns (0..255), int8 codes the signed values (-127..127, -128 = NaN), to be stored as
  uint8 / int8. ``rbits`` uint32 ``[R, C]`` (SR only, else ``None``; 16 random bits in the top half of each
  word, the low half zero: :func:`.rounding.sr_bits8`).
* ``row_encode_scaled(x, d, r, FMT, SR, rbits)``: the same with the row's scales already computed.
* ``row_decode(codes [R, C], d [R], FMT, NAN_BITS=True)`` -> fp32 ``[R, C]``, value = fp32(q * d);
  ``NAN_BITS=False`` (kernels that only compute with the values) skips the NaN canonicalisation.
* ``row_values(codes, FMT, NAN_BITS=True)``: the codes' values q (exact, before the row scale), as the non-flush
  read takes them (its products with the inputs are summed first and scaled by ``d`` per row).
* ``load_row_codes``: a ``[BV, BK]`` tile's codes and its rows' scales, as stored.
* ``load_row_tile`` / ``store_row_tile``: a decode kernel's ``[BV, BK]`` tile of a stored state (codes
  ``[.., V, K]``, scales ``[.., V]``): decode, or encode whole rows (amax over the K real columns).
"""

from __future__ import annotations

import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode

from .rounding import _canonical_nan, _encode_ieee, _encode_sr16, decode_bits, encode_bits

FLT_MAX = 3.4028234663852886e38


@triton.constexpr_function
def is_rowscaled(fmt) -> bool:
    """Whether the constexpr format code ``fmt`` is a row-scaled one (``fcode.FP8`` or ``fcode.INT8``): for the
    kernels' compile-time branches (``if is_rowscaled(FMT):``)."""
    return fmt == fcode.FP8 or fmt == fcode.INT8


@triton.jit
def row_amax(x):
    """max |x| over axis 1 of the fp32 tile ``[R, C]``, NaN ignored, +-inf counted as FLT_MAX -> ``[R]``."""
    ax = tl.where(x != x, 0.0, tl.minimum(tl.abs(x.to(tl.float32)), 3.4028234663852886e38))
    return tl.max(ax, axis=1)


@triton.jit
def row_scales(amax, FMT: tl.constexpr):
    """(d, r): d = min(fp32(amax / M), D_MAX), r = min(fp32(M / amax), FLT_MAX); both 1 where amax == 0."""
    zero = amax == 0
    safe = tl.where(zero, 1.0, amax)
    if FMT == fcode.FP8:
        m = tl.full(safe.shape, 448.0, tl.float32)
        d = tl.minimum(tl.math.div_rn(safe, m), 7.595588094610019e+35)
    else:
        tl.static_assert(FMT == fcode.INT8, "row_scales: FMT must be fcode.FP8 or fcode.INT8")
        m = tl.full(safe.shape, 127.0, tl.float32)
        d = tl.minimum(tl.math.div_rn(safe, m), 2.6793883890187504e+36)
    r = tl.minimum(tl.math.div_rn(m, safe), 3.4028234663852886e38)
    return tl.where(zero, 1.0, d), tl.where(zero, 1.0, r)


@triton.jit
def row_encode_scaled(x, r, FMT: tl.constexpr, SR: tl.constexpr, rbits):
    """Codes (int32 ``[R, C]``) of the fp32 tile ``x`` whose rows have encode factors ``r`` (``[R]``)."""
    x = x.to(tl.float32)
    nan = x != x
    xc = tl.where(nan, x, tl.minimum(tl.maximum(x, -3.4028234663852886e38), 3.4028234663852886e38))
    # NaN elements pass through unscaled: NVIDIA GPUs return 0x7FFFFFFF for NaN * r (sign lost), x86 keeps the
    # operand's sign; the select keeps x's own bits on both, so the code keeps the input's sign (as the reference)
    xs = tl.where(nan, x, xc * r[:, None])
    if FMT == fcode.FP8:
        code = encode_bits(xs, fcode.E4M3, SR, rbits)      # the raw E4M3 cast of x / d
    else:
        # |xs| to an integer (a format of subnormal spacing 1), sign bit 7
        if SR:
            sm = _encode_sr16(xs, rbits, 8, 7, -6, 0x7F, -1)
        else:
            sm = _encode_ieee(xs, 8, 7, -6, 0x7F, -1, SR, rbits)
        mag = sm & 0x7F
        code = tl.where(nan, -128, tl.where((sm >> 7) != 0, -mag, mag))
    return code


@triton.jit
def row_encode(x, FMT: tl.constexpr, SR: tl.constexpr, rbits):
    """Row-scaled encode of the fp32 tile ``x [R, C]`` (pad with 0): (codes int32 ``[R, C]``, d fp32 ``[R]``)."""
    d, r = row_scales(row_amax(x), FMT)
    return row_encode_scaled(x, r, FMT, SR, rbits), d


@triton.jit
def _int8_values(codes, NAN_BITS: tl.constexpr = True):
    """int8 codes (int8, or int32 holding them) -> fp32 values, without an int -> float conversion (a slow
    instruction on the GPU). The NaN code -128 gives 0x7FC00000 with ``NAN_BITS``, else some NaN without a select:
    with ``c`` the code sign-extended, ``(c + 127) | 0x4B000000`` is the fp32 pattern of 2**23 + 127 + c (one unit in
    the last place at 2**23), minus the float 2**23 + 127 the value c; for c = -128 it is all ones, a NaN."""
    if NAN_BITS:
        u = codes.to(tl.int32) & 0xFF
        v = ((u ^ 0x80) | 0x4B000000).to(tl.float32, bitcast=True) - 8388736.0
        q = tl.where(u == 0x80, 0x7FC00000, v.to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)
    else:
        c = (codes.to(tl.int32) << 24) >> 24
        q = ((c + 127) | 0x4B000000).to(tl.float32, bitcast=True) - 8388735.0
    return q


@triton.jit
def row_values(codes, FMT: tl.constexpr, NAN_BITS: tl.constexpr = True):
    """The codes' values q before the row scale, fp32 exactly: codes (uint8 E4M3 bits for fp8, int8 for int8, or
    int32 holding them), any shape. A NaN code gives a NaN: 0x7FC00000 with ``NAN_BITS``, else some NaN."""
    if FMT == fcode.FP8:
        q = decode_bits(codes.to(tl.int32) & 0xFF, fcode.E4M3, NAN_BITS)
    else:
        q = _int8_values(codes, NAN_BITS)
    return q


@triton.jit
def row_decode(codes, d, FMT: tl.constexpr, NAN_BITS: tl.constexpr = True):
    """codes (uint8 E4M3 bits for fp8, int8 for int8, or int32 holding them) ``[R, C]`` and decode scales
    ``d`` ``[R]`` -> fp32 ``[R, C]`` = fp32(q * d), NaN as 0x7FC00000 unless ``NAN_BITS=False``."""
    v = row_values(codes, FMT, NAN_BITS) * d[:, None]
    if NAN_BITS:
        v = _canonical_nan(v)
    return v


@triton.jit
def load_row_codes(p0, p1, sh, offs_v, offs_k, mv, mk, K, V):
    """The stored parts of rows ``offs_v``, key columns ``offs_k`` of the row-scaled state ``sh`` (slot * HV + head):
    codes ``p0 [.., V, K]`` -> ``[BV, BK]`` in the storage dtype (0 outside [V, K]) and decode scales ``p1 [.., V]``
    -> fp32 ``[BV]`` (1 outside V)."""
    m = mv[:, None] & mk[None, :]
    codes = tl.load(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], mask=m, other=0)
    d = tl.load(p1 + sh * V + offs_v, mask=mv, other=1.0)
    return codes, d


@triton.jit
def load_row_tile(p0, p1, sh, offs_v, offs_k, mv, mk, K, V, FMT: tl.constexpr, NAN_BITS: tl.constexpr = False):
    """Decode rows ``offs_v``, key columns ``offs_k`` of the row-scaled state ``sh`` (:func:`load_row_codes`) ->
    fp32 ``[BV, BK]``, 0 outside [V, K] (zero codes, scale 1)."""
    codes, d = load_row_codes(p0, p1, sh, offs_v, offs_k, mv, mk, K, V)
    return row_decode(codes, d, FMT, NAN_BITS)


@triton.jit
def store_row_tile(S, p0, p1, sh, offs_v, offs_k, mv, mk, K, V, FMT: tl.constexpr, SR: tl.constexpr, rbits):
    """Encode the fp32 tile ``S [BV, BK]`` (whole rows: ``offs_k`` covers the key dim) into codes ``p0`` and one
    scale per row ``p1`` of state ``sh``; each row's amax over its K real columns (the padding is ignored)."""
    m = mv[:, None] & mk[None, :]
    codes, d = row_encode(tl.where(m, S, 0.0), FMT, SR, rbits)
    tl.store(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], codes.to(p0.dtype.element_ty), mask=m)
    tl.store(p1 + sh * V + offs_v, d, mask=mv)
