"""Triton device functions for the storage formats (DESIGN.md sec. 4, docs/CONTRACTS.md).

Rounding is integer bit arithmetic on the fp32 bit pattern (int32), so the
results are identical on the GPU and in the Triton CPU interpreter (whose own
fp32->fp8 casts are wrong), and bit-identical to the torch reference
:mod:`replayssm_quant.quant.reference` (read its docstring for the exact
semantics: RNE / stochastic rounding, saturation, NaN, signed zero, NVFP4
block arithmetic and NaN blocks). On the GPU (:data:`HW_CASTS`) the RNE casts to
bf16 / fp16 / fp8 and the fp16 / fp8 decodes take the conversion instructions
instead, with the same bits (checked on the device by scripts/gpu/formats_check.py;
fp16 also in the interpreter by tests/kernels/test_rounding_triton.py).

Public (all ``@triton.jit``):

* ``encode_bits(x, FMT, SR, rbits)``: fp32 tensor -> int32 bit patterns.
* ``decode_bits(bits, FMT)``: int32 bit patterns -> fp32 (exact).
* ``nvfp4_amax(x)``: NaN-ignoring, inf-as-FLT_MAX max |x| of a tile -> fp32 scalar.
* ``nvfp4_encode_scale(amax)`` -> s_enc (fp32; 1 when amax is 0).
* ``nvfp4_encode(x [R, C], s_enc, SR, rbits)`` -> (codes uint8 [R, C//2], scale_bits uint8 [R, C//16]).
* ``nvfp4_decode(codes, scale_bits, s_enc)`` -> fp32 [R, C]; value = fp32(q * fp32(s_b / s_enc)),
  any NaN as 0x7FC00000 (see the reference's docstring).
* ``nvfp4_encode_pairs`` / ``nvfp4_decode_pairs``: the same on blocks laid out as rows
  (even and odd elements as two ``[NB, 8]`` tiles; no reshapes, cheaper to compile).
* ``nvfp4_decode_blocks(codes [NB, 8], scale_bits [NB], s_enc)`` -> fp32 [NB, 16] (contiguous rows).
* ``nvfp4_block_factor(scale_bits, s_enc)`` -> the per-block decode factor fp32(s_b / s_enc).
* ``nvfp4_block_scale(scale_bits)`` -> s_b fp32 (the E4M3 block scale; NaN code -> NaN).
* ``nvfp4_raw(codes [R, C//2])`` -> fp32 [R, C], the E2M1 values times 2**-6 (no block factor): for
  kernels that only sum products with the read copy and apply the block scales per block
  (:func:`.ring._read_rowdot`).
* ``pow2_f32(n)`` -> 2**n (fp32, exact) for int32 n in [-126, 127].

* ``sr_bits8(seed, g0, c1, c2, c3)`` -> uint32 Philox bits (10 rounds), eight elements per call, 16 random
  bits each (the top half of the word).

NVFP4 cost. Decode: one IEEE division per 16-element block, and per element the E2M1 value times 2**-6
(:func:`_e2m1_pairs_scaled`: on the GPU the code's E4M3 image through the hardware cvt; in the interpreter an fp32
bit formula), two multiplies (by 2**6 and the block factor) and, unless
``NAN_BITS=False``, an integer NaN
canonicalisation (GPU arithmetic returns NaN as 0x7FFFFFFF, x86 keeps the operand's NaN; the
integer select also keeps ``q * d`` from being contracted into an fma with a caller's add).
Encode (RNE): no per-element division either: seven per-block thresholds in the xs domain,
rounded in the right direction, give E2M1(fp32(xs / s_b)) bit for bit by a binary search of three
compares (:func:`_e2m1_rne_scaled`); SR still divides per element (it needs the discarded bits).
A kernel that only sums products with the values (the non-flush read) can skip both decode multiplies:
``nvfp4_raw`` gives the value times 2**-6 and the block scale ``nvfp4_block_scale`` multiplies per block
(:func:`.ring._read_rowdot`).

``FMT`` is a ``tl.constexpr`` format code (:mod:`replayssm_quant.quant.format_codes`); ``rbits`` is a uint32
(or int32) tensor shaped like ``x``, only read when ``SR`` is true (pass
``None`` otherwise). For ``nvfp4_encode``/``nvfp4_decode`` ``s_enc`` is one fp32
scalar per tile; the ``_pairs`` variants also take ``[NB, 1]``.

Division: Triton 3.6 lowers fp32 ``a / b`` to ``div.full.f32`` on NVIDIA GPUs
(up to 2 ulp off; triton-lang/triton#10661), so every division here is
``tl.math.div_rn`` (IEEE round-to-nearest, ``div.rn.f32``), which the
interpreter also computes exactly. Kernels that must match a torch reference
bit for bit should do the same.
"""

from __future__ import annotations

import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode
from replayssm_quant.quant.format_codes import FORMAT_CODE  # noqa: F401  (the ``FMT`` codes, by format name)

FLT_MAX = 3.4028234663852886e38

#: On the GPU the RNE casts to bf16 / fp16 / fp8 (E4M3) and the fp16 / fp8 decodes use the conversion
#: instructions (``cvt.rn[.satfinite]``: one per element instead of ~30 integer operations; the
#: saturation and NaN rules of the integer path are applied around them), so the result is the same bits
#: (scripts/gpu/formats_check.py checks every format against the torch reference on the device). The
#: interpreter keeps the integer path: its fp32->fp8 casts round wrongly at binade edges and do not saturate.
HW_CASTS = tl.constexpr(not triton.knobs.runtime.interpret)


@triton.jit
def _encode_ieee(x, NB: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, MAXB: tl.constexpr,
                 NANB: tl.constexpr, SR: tl.constexpr, rbits):
    """fp32 -> sign|magnitude bits of a format with NB bits, MB mantissa bits (int32)."""
    u = x.to(tl.int32, bitcast=True)
    a = u & 0x7FFFFFFF
    sign = (u >> 31) & 1
    e32 = a >> 23
    mant = (a & 0x7FFFFF) | tl.where(e32 > 0, 0x800000, 0)
    e = tl.maximum(e32, 1) - 127
    shift = (23 - MB) + tl.maximum((1 - BIAS) - e, 0)
    pre = tl.minimum(tl.maximum(shift - 30, 0), 24)
    mant = mant >> pre
    shift = tl.minimum(shift, 30)
    one = (shift * 0) + 1
    unit = one << shift
    n = mant >> shift
    rem = mant & (unit - 1)
    if SR:
        r = rbits.to(tl.uint32, bitcast=True)
        rr = (r >> (32 - shift).to(tl.uint32)).to(tl.int32)
        up = (rem + rr) >= unit
    else:
        half = unit >> 1
        up = (rem > half) | ((rem == half) & ((n & 1) == 1))
    n = n + up.to(tl.int32)
    mag = (tl.maximum(e - (1 - BIAS), 0) << MB) + n
    mag = tl.minimum(mag, MAXB)
    if NANB >= 0:
        mag = tl.where(a > 0x7F800000, NANB, mag)
    return mag | (sign << (NB - 1))


@triton.jit
def _encode_sr16(x, rbits, NB: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, MAXB: tl.constexpr,
                 NANB: tl.constexpr):
    """Stochastic rounding of :func:`_encode_ieee` (``SR``) in fewer operations, for formats of at most 7 mantissa
    bits whose smallest normal is far above fp32's (E4M3, E5M2, E2M1, int8 as ``MB = 7, BIAS = -6``; not bf16, fp16),
    and random words whose low 16 bits are zero (:func:`sr_bits8`; the top 16 are the random bits): the same bits,
    in integer operations and one exact multiply (no fma, no flush-to-zero instruction).

    With at least 16 discarded bits (``23 - MB >= 16``) and ``r = r16 * 2**16``, the general rule
    ``up = rem + (r >> (32 - shift)) >= 2**shift`` becomes: ``n + up = (F + r16) >> 16`` for the fixed-point value
    ``F = floor(|x| / unit * 2**16)`` (also under the general rule's pre-shift of tiny values). So:

    * target normals (``|x| >= 2**(1 - BIAS)``): ``F`` is the fp32 pattern itself (mantissa and exponent), with the
      random bits added under the kept mantissa and shifted down (a mantissa carry moves into the exponent, as
      rounding up must), then rebiased;
    * target subnormals (spacing ``2**(1 - BIAS - MB)``): ``F`` is ``|x|`` times a power of two, below ``2**(MB + 16)``,
      truncated to an integer (both exact; an fp32 subnormal input gives ``F = 0`` as in the general rule).
    """
    u = x.to(tl.int32, bitcast=True)
    a = u & 0x7FFFFFFF
    r16 = (rbits.to(tl.uint32, bitcast=True) >> 16).to(tl.int32)
    # (inf / NaN patterns clamped: no int32 overflow; NaN is selected below)
    mag_n = ((tl.minimum(a, 0x7F800000) + (r16 << (7 - MB))) >> (23 - MB)) - ((127 - BIAS) << MB)
    NORMAL0: tl.constexpr = (128 - BIAS) << 23   # fp32 pattern of 2**(1 - BIAS), the smallest target normal
    F = (tl.minimum(a, NORMAL0 - 1).to(tl.float32, bitcast=True) * (2.0 ** (BIAS + MB + 15))).to(tl.int32)
    mag = tl.minimum(tl.where(a >= NORMAL0, mag_n, (F + r16) >> 16), MAXB)
    if NANB >= 0:
        mag = tl.where(a > 0x7F800000, NANB, mag)
    return mag | (((u >> 31) & 1) << (NB - 1))


@triton.jit
def _decode_ieee(bits, NB: tl.constexpr, EB: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                 NANB: tl.constexpr, HAS_INF: tl.constexpr, SUBSCALE: tl.constexpr):
    """sign|magnitude bits (int32, low NB bits) -> fp32; SUBSCALE = 2**(1 - BIAS - MB)."""
    b = bits.to(tl.int32) & ((1 << NB) - 1)
    sign = b >> (NB - 1)
    mag = b & ((1 << (NB - 1)) - 1)
    E = mag >> MB
    m = mag & ((1 << MB) - 1)
    normal = ((E + (127 - BIAS)) << 23) | (m << (23 - MB))
    if HAS_INF:
        normal = tl.where(E == (1 << EB) - 1, 0x7F800000 | (m << (23 - MB)), normal)
    elif NANB >= 0:
        normal = tl.where(mag == NANB, 0x7FC00000, normal)
    sub = (m.to(tl.float32) * SUBSCALE).to(tl.int32, bitcast=True)
    out = tl.where(E == 0, sub, normal) | (sign << 31)
    return out.to(tl.float32, bitcast=True)


@triton.jit
def _encode_hw(x, NB: tl.constexpr, MAXV: tl.constexpr, NANB: tl.constexpr, DT: tl.constexpr, IT: tl.constexpr):
    """The RNE of :func:`_encode_ieee` by the hardware cast to DT (bit type IT): clamping to +-MAXV first
    gives the saturation (an RNE cast of a clamped value never rounds past MAXV), NaN -> NANB with the sign."""
    u = x.to(tl.int32, bitcast=True)
    xc = tl.minimum(tl.maximum(x, -MAXV), MAXV)
    bits = xc.to(DT).to(IT, bitcast=True).to(tl.int32) & ((1 << NB) - 1)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return tl.where(nan, NANB | ((u >> 31) & 1) << (NB - 1), bits)


@triton.jit
def encode_bits(x, FMT: tl.constexpr, SR: tl.constexpr, rbits):
    """Round fp32 ``x`` into format FMT; returns int32 bit patterns (16/8/4 bits in the low bits).

    RNE, or with SR stochastic rounding using the uint32 tensor ``rbits`` (shaped like x; for the 8- and 4-bit
    formats words whose low 16 bits are zero, as :func:`sr_bits8` gives: :func:`_encode_sr16`).
    Saturating, NaN-preserving, signed zero kept. ``fcode.FP32`` returns the raw bits.
    """
    x = x.to(tl.float32)
    if FMT == fcode.FP32:
        r = x.to(tl.int32, bitcast=True)
    elif FMT == fcode.BF16:
        if HW_CASTS and not SR:
            r = _encode_hw(x, 16, 3.3895313892515355e38, 0x7FC0, tl.bfloat16, tl.int16)
        else:
            r = _encode_ieee(x, 16, 7, 127, 0x7F7F, 0x7FC0, SR, rbits)
    elif FMT == fcode.FP16:
        if HW_CASTS and not SR:
            r = _encode_hw(x, 16, 65504.0, 0x7E00, tl.float16, tl.int16)
        else:
            r = _encode_ieee(x, 16, 10, 15, 0x7BFF, 0x7E00, SR, rbits)
    elif FMT == fcode.E4M3:
        if SR:
            r = _encode_sr16(x, rbits, 8, 3, 7, 0x7E, 0x7F)
        elif HW_CASTS:
            r = _encode_hw(x, 8, 448.0, 0x7F, tl.float8e4nv, tl.int8)
        else:
            r = _encode_ieee(x, 8, 3, 7, 0x7E, 0x7F, SR, rbits)
    elif FMT == fcode.E5M2:
        if SR:
            r = _encode_sr16(x, rbits, 8, 2, 15, 0x7B, 0x7F)
        else:
            r = _encode_ieee(x, 8, 2, 15, 0x7B, 0x7F, SR, rbits)
    else:
        tl.static_assert(FMT == fcode.E2M1, "encode_bits: FMT must be an element format code (nvfp4 uses nvfp4_encode)")
        if SR:
            r = _encode_sr16(x, rbits, 4, 1, 1, 0x7, -1)
        else:
            r = _encode_ieee(x, 4, 1, 1, 0x7, -1, SR, rbits)
    return r


@triton.jit
def decode_bits(bits, FMT: tl.constexpr, NAN_BITS: tl.constexpr = True):
    """Exact decode of int32 bit patterns of format FMT to fp32.

    ``NAN_BITS=False`` (kernels that only compute with the values): on the GPU a NaN code decodes to some
    NaN rather than the reference's bit pattern (saves the fix-up after the fp16 / fp8 cvt)."""
    if FMT == fcode.FP32:
        r = bits.to(tl.int32).to(tl.float32, bitcast=True)
    elif FMT == fcode.BF16:
        r = ((bits.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)
    elif FMT == fcode.FP16:
        if HW_CASTS:   # cvt.f32.f16; a NaN keeps its payload as in the integer path
            b = bits.to(tl.int32)
            h = b.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32).to(tl.int32, bitcast=True)
            nan = ((b & 0x8000) << 16) | 0x7F800000 | ((b & 0x3FF) << 13)
            if NAN_BITS:
                h = tl.where((b & 0x7FFF) > 0x7C00, nan, h)
            r = h.to(tl.float32, bitcast=True)
        else:
            r = _decode_ieee(bits, 16, 5, 10, 15, 0x7E00, True, 5.960464477539063e-08)
    elif FMT == fcode.E4M3:
        if HW_CASTS:   # cvt e4m3x2 -> f16x2 -> f32 (exact); NaN as 0x7FC00000 with the sign
            b = bits.to(tl.int32)
            h = b.to(tl.int8).to(tl.float8e4nv, bitcast=True).to(tl.float32).to(tl.int32, bitcast=True)
            nan = ((b & 0x80) << 24) | 0x7FC00000
            if NAN_BITS:
                h = tl.where((b & 0x7F) == 0x7F, nan, h)
            r = h.to(tl.float32, bitcast=True)
        else:
            r = _decode_ieee(bits, 8, 4, 3, 7, 0x7F, False, 0.001953125)
    elif FMT == fcode.E5M2:
        r = _decode_ieee(bits, 8, 5, 2, 15, 0x7F, True, 1.52587890625e-05)
    else:
        tl.static_assert(FMT == fcode.E2M1, "decode_bits: FMT must be an element format code (nvfp4 uses nvfp4_decode)")
        r = _decode_ieee(bits, 4, 2, 1, 1, -1, False, 0.5)
    return r


@triton.jit
def sr_bits8(seed, g0, c1, c2, c3):
    """Random bits for eight consecutive elements per Philox call (10 rounds; one call costs ~100 integer
    instructions, so one call per element would dominate an SR cast): 16 random bits per element, the
    DESIGN.md minimum for 8- and 16-bit formats (E2M1 needs 8), as the top half of a uint32 whose low half is
    zero, so :func:`_encode_ieee` adds them to the discarded bits like any 32-bit word.

    ``g0``: integer tensor ``[R, N]`` of group counters (taken as uint32); c1..c3 tensors of a
    broadcastable shape or scalars. Returns uint32 ``[R, 8 N]``: element ``8 j + 2 w + h`` of a row is
    half ``h`` (0: low, 1: high 16 bits) of output word ``w`` of ``tl.philox(seed, g0[:, j], c1, c2, c3)``,
    shifted to the top. Torch mirror: :func:`replayssm_quant.quant.philox.grouped_rbits`.
    """
    z = (g0 * 0).to(tl.uint32)
    c0 = g0.to(tl.uint32)
    c1 = (z + c1).to(tl.uint32)
    c2 = (z + c2).to(tl.uint32)
    c3 = (z + c3).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, c3)
    w = tl.join(tl.join(r0, r2), tl.join(r1, r3))          # [R, N, 2, 2]: word 2 i + j at [.., i, j] (join adds a last dim)
    hw = tl.join(w << 16, (w >> 16) << 16)                  # [R, N, 2, 2, 2]: half h of that word at [.., h]
    return tl.reshape(hw, (g0.shape[0], 8 * g0.shape[1]))


@triton.jit
def nvfp4_amax(x):
    """max |x| over a whole fp32 tile, NaN ignored, +-inf counted as FLT_MAX (fp32 scalar)."""
    ax = tl.where(x != x, 0.0, tl.minimum(tl.abs(x.to(tl.float32)), 3.4028234663852886e38))
    return tl.max(tl.reshape(ax, (ax.numel,)), axis=0)


@triton.jit
def nvfp4_encode_scale(amax):
    """Second-level encode scale s_enc = fp32(2688 / amax), capped at FLT_MAX; 1 where amax == 0."""
    safe = tl.where(amax == 0, 1.0, amax)
    s = tl.minimum(tl.math.div_rn(tl.full(safe.shape, 2688.0, tl.float32), safe), 3.4028234663852886e38)
    return tl.where(amax == 0, 1.0, s)


@triton.jit
def _nvfp4_prep(x, s_enc):
    """NaN -> 0 and +-inf -> +-FLT_MAX, then xs = fp32(x * s_enc); returns (xs, isnan)."""
    x = x.to(tl.float32)
    nan = x != x
    xf = tl.where(nan, 0.0, x)
    xf = tl.minimum(tl.maximum(xf, -3.4028234663852886e38), 3.4028234663852886e38)
    return xf * s_enc, nan


@triton.jit
def _xs_threshold(s_b, t, h, UP: tl.constexpr):
    """Per block: the fp32 rounding of the exact (t + h) * s_b (UP false: round down) or
    (t - h) * s_b (UP true: round up), for s_b > 0 an E4M3 value, t an E2M1 midpoint and h half
    an fp32 ulp of t. t * s_b and h * s_b are exact (few bits, normal), so their rounded sum
    plus the Fast2Sum error term gives the directed rounding; an fma contraction of any of
    these products computes the same values."""
    a = t * s_b
    if UP:
        b = -(h * s_b)
    else:
        b = h * s_b
    s = a + b
    err = b - (s - a)                       # exact: (a + b) - s
    sb = s.to(tl.int32, bitcast=True)       # s > 0
    if UP:
        sb = sb + (err > 0).to(tl.int32)
    else:
        sb = sb - (err < 0).to(tl.int32)
    return sb.to(tl.float32, bitcast=True)


@triton.jit
def _nextup(t):
    """The next fp32 above the positive finite ``t`` (one ulp up, on the bits)."""
    return (t.to(tl.int32, bitcast=True) + 1).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_rne_scaled(xs, s_b):
    """E2M1 bits of fp32(xs / s_b), RNE, without dividing: ``xs`` fp32 [NB, 8] (finite),
    ``s_b`` [NB, 1] E4M3 values > 0. fp32(xs / s_b) > t (t = 0.25, 1.25, 2.5, 5: ties round
    down to the even code) iff |xs| / s_b > t + ulp(t)/2 iff |xs| > RD((t + ulp(t)/2) * s_b),
    i.e. |xs| >= the next fp32 above that; fp32(xs / s_b) >= t (t = 0.75, 1.75, 3.5: ties up) iff
    |xs| >= RU((t - ulp(t)/2) * s_b) (the midpoints have at most 3 significant bits, so a tie at
    t +- ulp(t)/2 rounds to t). The magnitude code is the number of these seven per-block
    thresholds T0 <= ... <= T6 that |xs| reaches, found by a three-level binary search (three
    compares and four selects per element instead of seven compares and adds); equal to
    ``encode_bits(div_rn(xs, s_b), 6, False, None)`` (magnitude bits) bit for bit."""
    a = tl.abs(xs)
    t0 = _nextup(_xs_threshold(s_b, 0.25, 1.4901161193847656e-08, False))
    t1 = _xs_threshold(s_b, 0.75, 2.9802322387695312e-08, True)
    t2 = _nextup(_xs_threshold(s_b, 1.25, 5.960464477539063e-08, False))
    t3 = _xs_threshold(s_b, 1.75, 5.960464477539063e-08, True)
    t4 = _nextup(_xs_threshold(s_b, 2.5, 1.1920928955078125e-07, False))
    t5 = _xs_threshold(s_b, 3.5, 1.1920928955078125e-07, True)
    t6 = _nextup(_xs_threshold(s_b, 5.0, 2.384185791015625e-07, False))
    c2 = a >= t3
    c1 = a >= tl.where(c2, t5, t1)
    c0 = a >= tl.where(c2, tl.where(c1, t6, t4), tl.where(c1, t2, t0))
    return tl.where(c2, 4, 0) + tl.where(c1, 2, 0) + c0.to(tl.int32)


@triton.jit
def _nvfp4_elem_codes(xs, s_b, SR: tl.constexpr, rbits):
    """E2M1 bits of fp32(xs / s_b) (RNE or SR); 0 (with the sign of xs) where s_b == 0.
    ``xs`` fp32 [NB, 8], ``s_b`` [NB, 1]."""
    if SR:
        s_full = tl.broadcast_to(s_b, xs.shape)
        zero_scale = s_full == 0
        q_in = tl.where(zero_scale, xs * 0.0, tl.math.div_rn(xs, tl.where(zero_scale, 1.0, s_full)))
        r = _encode_sr16(q_in, rbits, 4, 1, 1, 0x7, -1)
    else:
        pos = tl.where(s_b == 0, 1.0, s_b)
        n = tl.where(s_b == 0, 0, _e2m1_rne_scaled(xs, pos))
        r = n | ((xs.to(tl.int32, bitcast=True) >> 28) & 8)
    return r


@triton.jit
def _canonical_nan(v):
    """Every NaN of the fp32 tensor ``v`` -> 0x7FC00000 (done on the bits: GPU arithmetic returns
    0x7FFFFFFF for a NaN result, x86 / the interpreter propagate the operand's NaN)."""
    b = v.to(tl.int32, bitcast=True)
    b = tl.where((b & 0x7FFFFFFF) > 0x7F800000, 0x7FC00000, b)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def nvfp4_encode_pairs(x_even, x_odd, s_enc, SR: tl.constexpr, rb_even, rb_odd):
    """NVFP4-encode NB blocks laid out as rows: ``x_even`` / ``x_odd`` fp32 ``[NB, 8]`` hold
    elements 0, 2, ..., 14 and 1, 3, ..., 15 of each 16-element block; ``s_enc`` a scalar or
    ``[NB, 1]``; ``rb_even`` / ``rb_odd`` uint32 ``[NB, 8]`` (SR only).

    Returns ``(codes uint8 [NB, 8], scale_bits uint8 [NB])``: byte i of a block = element 2i
    (low nibble) | element 2i+1 (high nibble). A block with a NaN gets scale bits 0x7F and
    zero codes.
    """
    xe, ne = _nvfp4_prep(x_even, s_enc)
    xo, no = _nvfp4_prep(x_odd, s_enc)
    bmax = tl.maximum(tl.max(tl.abs(xe), axis=1), tl.max(tl.abs(xo), axis=1))
    sbits = encode_bits(tl.math.div_rn(bmax, tl.full(bmax.shape, 6.0, tl.float32)), fcode.E4M3, False, None)
    s_b = decode_bits(sbits, fcode.E4M3, False)[:, None]   # (never the NaN code: the block max is finite)
    bnan = tl.maximum(tl.max(ne.to(tl.int32), axis=1), tl.max(no.to(tl.int32), axis=1)) > 0
    codes = _nvfp4_elem_codes(xe, s_b, SR, rb_even) | (_nvfp4_elem_codes(xo, s_b, SR, rb_odd) << 4)
    codes = tl.where(bnan[:, None], 0, codes).to(tl.uint8)
    sbits = tl.where(bnan, 0x7F, sbits).to(tl.uint8)
    return codes, sbits


@triton.jit
def _e2m1_raw(n, SHIFT: tl.constexpr):
    """The E2M1 code in bits SHIFT..SHIFT+3 of the int32 ``n`` placed in an fp32 as magnitude << 22 with the
    sign: its value times 2**-126 exactly (exponent field = E2M1 exponent, bit 22 = mantissa; code 1 is the
    fp32 subnormal 2**-127). Two shifts and one 3-input logic op, no compare or select."""
    return (((n << (22 - SHIFT)) & 0x01C00000) | ((n << (28 - SHIFT)) & -2147483648)).to(tl.float32, bitcast=True)


@triton.jit
def nvfp4_block_scale(scale_bits):
    """E4M3 block-scale bits (uint8/int32, any shape) -> s_b fp32 of the same shape (the NaN code -> a NaN; on the
    GPU through the hardware cvt, :func:`decode_bits`)."""
    return decode_bits(scale_bits.to(tl.int32) & 0xFF, fcode.E4M3, False)


@triton.jit
def nvfp4_block_factor(scale_bits, s_enc):
    """Per-block decode factor d = fp32(s_b / s_enc) (IEEE division): ``scale_bits`` uint8/int32
    E4M3 bits (any shape), ``s_enc`` fp32 broadcastable to it -> fp32 of the broadcast shape.
    An element decodes to fp32(q * d)."""
    s_b = nvfp4_block_scale(scale_bits)
    return tl.math.div_rn(s_b, tl.broadcast_to(s_enc, s_b.shape))


#: The E4M3 image of an E2M1 code: the sign to bit 7, the magnitude (e1 e0 m) to bits 4..2. Its E4M3 value is the
#: E2M1 value times 2**-6 exactly (exponent field e against E4M3's bias 7 instead of E2M1's 1; the E2M1
#: subnormal 0.5 is the E4M3 subnormal 4 * 2**-9), never NaN. The bit moves take four codes per 32-bit word at a
#: time, then the hardware e4m3x2 -> f16x2 and f16 -> f32 cvts: fewer instructions than :func:`_e2m1_raw` per
#: nibble with its byte extraction (compiled counts: reports/bench/speed/sass/nvfp4_decode.md).
_E2M1_E4M3_ASM = tl.constexpr("""
{
.reg .b32 e, o, t;
.reg .b16 e0, e1, o0, o1, h<8>;
.reg .b32 he0, he1, ho0, ho1;
shl.b32 t, $8, 2;
and.b32 e, t, 0x1C1C1C1C;
shl.b32 t, $8, 4;
and.b32 t, t, 0x80808080;
or.b32 e, e, t;
shr.b32 t, $8, 2;
and.b32 o, t, 0x1C1C1C1C;
and.b32 t, $8, 0x80808080;
or.b32 o, o, t;
mov.b32 {e0, e1}, e;
mov.b32 {o0, o1}, o;
cvt.rn.f16x2.e4m3x2 he0, e0;
cvt.rn.f16x2.e4m3x2 he1, e1;
cvt.rn.f16x2.e4m3x2 ho0, o0;
cvt.rn.f16x2.e4m3x2 ho1, o1;
mov.b32 {h0, h1}, he0;
mov.b32 {h2, h3}, he1;
mov.b32 {h4, h5}, ho0;
mov.b32 {h6, h7}, ho1;
cvt.f32.f16 $0, h0;
cvt.f32.f16 $1, h1;
cvt.f32.f16 $2, h2;
cvt.f32.f16 $3, h3;
cvt.f32.f16 $4, h4;
cvt.f32.f16 $5, h5;
cvt.f32.f16 $6, h6;
cvt.f32.f16 $7, h7;
}
""")


@triton.jit
def _e2m1_pairs_scaled(codes, PTX: tl.constexpr = True):
    """NVFP4 code bytes (uint8, any shape) -> ``(even, odd)`` fp32 of the same shape: the E2M1 values of the low
    and the high nibbles times 2**-6, exactly. On the GPU (:data:`HW_CASTS`) with ``PTX`` by the E4M3 image of
    each code and the hardware cvt (:data:`_E2M1_E4M3_ASM`; inline PTX, four bytes per call); in the interpreter
    (which runs no inline assembly) or without ``PTX`` :func:`_e2m1_raw` times 2**120, the same bits (checked on
    the device by tests/kernels/test_rounding_triton.py::test_nvfp4_raw_is_the_e2m1_value_times_2_pow_minus_6)."""
    if HW_CASTS and PTX:
        even, odd = tl.inline_asm_elementwise(asm=_E2M1_E4M3_ASM, constraints="=r,=r,=r,=r,=r,=r,=r,=r,r",
                                              args=[codes], dtype=(tl.float32, tl.float32), is_pure=True, pack=4)
    else:
        c = codes.to(tl.int32)
        even = _e2m1_raw(c, 0) * 1.329227995784916e36
        odd = _e2m1_raw(c, 4) * 1.329227995784916e36
    return even, odd


@triton.jit
def _e2m1_values(codes):
    """NVFP4 code bytes (uint8, any shape) -> ``(even, odd)``: the E2M1 values of the low and the high nibbles,
    fp32, exactly (:func:`_e2m1_pairs_scaled` times 2**6)."""
    even, odd = _e2m1_pairs_scaled(codes)
    return even * 64.0, odd * 64.0


@triton.jit
def nvfp4_raw(codes, PTX: tl.constexpr = True):
    """NVFP4 element codes ``uint8 [R, C//2]`` (element 2i in the low nibble) -> fp32 ``[R, C]``: each
    E2M1 value times 2**-6, exactly (:func:`_e2m1_pairs_scaled`, whose decode ``PTX`` picks). The block
    scales are left to the caller (:func:`nvfp4_block_scale`)."""
    R: tl.constexpr = codes.shape[0]
    C2: tl.constexpr = codes.shape[1]
    even, odd = _e2m1_pairs_scaled(codes, PTX)
    return tl.reshape(tl.join(even, odd), (R, 2 * C2))


@triton.jit
def pow2_f32(n):
    """2**n as fp32 from the exponent bits, for int32 ``n`` (any shape) in [-126, 127]."""
    return ((n + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def nvfp4_decode_pairs(codes, scale_bits, s_enc):
    """Inverse of :func:`nvfp4_encode_pairs`: ``codes uint8 [NB, 8]``, ``scale_bits uint8 [NB]``,
    ``s_enc`` scalar or ``[NB, 1]`` -> ``(even, odd)`` fp32 ``[NB, 8]``; value = fp32(q * fp32(s_b / s_enc)),
    NaN stored as 0x7FC00000."""
    even, odd = _e2m1_values(codes)
    d = nvfp4_block_factor(scale_bits[:, None], s_enc)
    return _canonical_nan(even * d), _canonical_nan(odd * d)


@triton.jit
def nvfp4_decode_blocks(codes, scale_bits, s_enc):
    """NB blocks as rows: ``codes uint8 [NB, 8]``, ``scale_bits uint8 [NB]``, ``s_enc`` scalar or
    ``[NB, 1]`` -> fp32 ``[NB, 16]`` (element j of each block in column j; contiguous rows, so
    a kernel can store them with wide vector stores)."""
    even, odd = nvfp4_decode_pairs(codes, scale_bits, s_enc)
    return tl.reshape(tl.join(even, odd), (codes.shape[0], 16))


@triton.jit
def nvfp4_encode(x, s_enc, SR: tl.constexpr, rbits):
    """NVFP4-encode an fp32 tile ``[R, C]`` (C a multiple of 16) with encode scale ``s_enc``
    (a scalar for the whole tile).

    Returns ``(codes uint8 [R, C//2], scale_bits uint8 [R, C//16])``; element 2i in the
    low nibble. SR applies to the element codes (block scales are RNE). A block with
    a NaN gets scale bits 0x7F (E4M3 NaN) and zero codes.
    """
    R: tl.constexpr = x.shape[0]
    C: tl.constexpr = x.shape[1]
    tl.static_assert(C % 16 == 0, "nvfp4_encode: C must be a multiple of 16")
    NB: tl.constexpr = R * C // 16
    xe, xo = tl.split(tl.reshape(x, (NB, 8, 2)))
    if SR:
        re, ro = tl.split(tl.reshape(rbits, (NB, 8, 2)))
    else:
        re = None
        ro = None
    codes, sbits = nvfp4_encode_pairs(xe, xo, s_enc, SR, re, ro)
    return tl.reshape(codes, (R, C // 2)), tl.reshape(sbits, (R, C // 16))


@triton.jit
def nvfp4_decode(codes, scale_bits, s_enc, NAN_BITS: tl.constexpr = True):
    """Decode NVFP4 ``codes uint8 [R, C//2]``, ``scale_bits uint8 [R, C//16]`` with a scalar
    ``s_enc`` -> fp32 ``[R, C]``; value = fp32(q * fp32(s_b / s_enc)), NaN stored as 0x7FC00000
    (``NAN_BITS=False``, for kernels that only compute with the values: some NaN).

    One division per 16-element block; per element the E2M1 value (:func:`_e2m1_values`: the scaled decode of
    :func:`_e2m1_pairs_scaled` times 2**6) and one multiply by the block factor.
    The nibbles are interleaved with ``join`` + ``reshape`` (in registers when a thread holds whole
    code bytes), the factors broadcast over the 16 elements of their block."""
    R: tl.constexpr = codes.shape[0]
    C2: tl.constexpr = codes.shape[1]
    NBR: tl.constexpr = C2 // 8
    d = nvfp4_block_factor(scale_bits, s_enc)                                     # [R, C//16]
    d2 = tl.reshape(tl.broadcast_to(d[:, :, None], (R, NBR, 8)), (R, C2))          # per code byte
    even, odd = _e2m1_values(codes)
    lo = even * d2
    hi = odd * d2
    if NAN_BITS:
        lo = _canonical_nan(lo)
        hi = _canonical_nan(hi)
    return tl.reshape(tl.join(lo, hi), (R, 2 * C2))
