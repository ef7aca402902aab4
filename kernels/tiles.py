"""State tiles and step inputs: load, decode, encode and store (Triton device functions of the decode kernels).

A tile is ``[rows, BK]`` of one (slot, head) state in its storage format (docs/CONTRACTS.md, storage table;
format codes :mod:`replayssm_quant.quant.format_codes`), decoded to fp32 on load and rounded on store. The nvfp4
helpers at the end serve the non-flush read, which sums products with the nvfp4 or row-scaled read copy's values
before its scales (:func:`.ring._read_rowdot`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode

from .rounding import (decode_bits, encode_bits, nvfp4_block_scale, nvfp4_decode, nvfp4_encode, nvfp4_raw,
                       pow2_f32, sr_bits8)
from .rowscaled import is_rowscaled, load_row_codes, load_row_tile, row_values, store_row_tile


@triton.jit
def _load_tile(p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, FMT: tl.constexpr, BK: tl.constexpr,
               VALUES: tl.constexpr = False, K0=0):
    """Decode the [BV, BK] tile of state (slot*HV+head = sh) to fp32 (0 outside [V, K]); ``offs_k`` =
    ``K0 + arange(0, BK)`` (a K chunk of the non-flush launch: K0 and BK multiples of 16 for nvfp4).

    A NaN's bits never reach a store (kernels only compute with the values), so fp16 / fp8 skip the NaN
    fix-up of :func:`.rounding.decode_bits`. ``VALUES`` (the read copy of a non-flush output): nvfp4 also
    skips its NaN select, which otherwise keeps each decoded value a rounded product (no fma contraction
    with the caller's add), as the flush's bit-exact recurrence needs, and every format skips the select of
    the masked elements: their zero bits (codes and block scales) decode to +0 (one select per element less
    in the non-flush loop)."""
    m = mv[:, None] & mk[None, :]
    if FMT == fcode.FP32:
        S = tl.load(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], mask=m, other=0.0)
    elif FMT == fcode.NVFP4:
        codes, sb = _load_nvfp4_parts(p0, p1, sh, offs_v, mv, K, V, BK, K0)
        s_enc = tl.load(p2 + sh)
        S = nvfp4_decode(codes, sb, s_enc, not VALUES)
        if not VALUES:
            S = tl.where(m, S, 0.0)
    elif is_rowscaled(FMT):   # codes x the row's decode scale; zero codes outside [V, K]
        S = load_row_tile(p0, p1, sh, offs_v, offs_k, mv, mk, K, V, FMT)
    else:
        bits = tl.load(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], mask=m, other=0)
        S = decode_bits(bits.to(tl.int32), FMT, False)
        if not VALUES:
            S = tl.where(m, S, 0.0)
    return S


@triton.jit
def _load_nvfp4_parts(p0, p1, sh, offs_v, mv, K, V, BK: tl.constexpr, K0=0):
    """The raw nvfp4 parts of key columns ``K0 .. K0 + BK`` of rows ``offs_v``: element codes uint8
    ``[BV, BK // 2]`` and block-scale bits uint8 ``[BV, BK // 16]`` (0 outside [V, K])."""
    K2 = K // 2
    K16 = K // 16
    o2 = K0 // 2 + tl.arange(0, BK // 2)
    o16 = K0 // 16 + tl.arange(0, BK // 16)
    codes = tl.load(p0 + sh * V * K2 + offs_v[:, None] * K2 + o2[None, :],
                    mask=mv[:, None] & (o2 < K2)[None, :], other=0)
    sb = tl.load(p1 + sh * V * K16 + offs_v[:, None] * K16 + o16[None, :],
                 mask=mv[:, None] & (o16 < K16)[None, :], other=0)
    return codes, sb


@triton.jit
def _load_read(p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, FMT: tl.constexpr, BK: tl.constexpr, K0=0,
               E2M1_PTX: tl.constexpr = True):
    """A non-flush step's read-copy tile ``[BV, BK]`` (key columns ``offs_k = K0 + arange(0, BK)``) as
    :func:`.ring._read_rowdot` takes it: ``(S, SB)``. nvfp4: ``S`` the E2M1 values times 2**-6
    (:func:`.rounding.nvfp4_raw`; ``E2M1_PTX`` picks its decode, the same bits), ``SB`` the block scales s_b fp32
    ``[BV, BK // 16]``; row-scaled fp8 / int8:
    ``S`` the codes' values q (:func:`.rowscaled.row_values`; a NaN code gives some NaN), ``SB`` the rows' decode
    scales d fp32 ``[BV]``; other formats: the decoded values (:func:`_load_tile`, ``VALUES``) and ``SB = S``
    (unused)."""
    if FMT == fcode.NVFP4:
        codes, sb = _load_nvfp4_parts(p0, p1, sh, offs_v, mv, K, V, BK, K0)
        return nvfp4_raw(codes, E2M1_PTX), nvfp4_block_scale(sb)
    elif is_rowscaled(FMT):
        codes, d = load_row_codes(p0, p1, sh, offs_v, offs_k, mv, mk, K, V)
        return row_values(codes, FMT, False), d
    else:
        S = _load_tile(p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, FMT, BK, True, K0)
        return S, S


@triton.jit
def _store_tile(S, p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, seed, c1, c2, s_enc,
                FMT: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr, BK: tl.constexpr):
    """Round the fp32 tile S [BV, BK] into format FMT (SR: element (v, k) takes half k % 2 of word (k % 8) // 2
    of Philox(seed, v * ceil(K / 8) + k // 8, c1, c2, TAG), :func:`.rounding.sr_bits8`). nvfp4: ``s_enc`` is
    the head's encode scale (stored by the caller). fp8 / int8: the tile holds whole rows, each row's decode
    scale is computed here from its amax (:func:`.rowscaled.store_row_tile`). ``offs_k`` is ``arange(0, BK)``."""
    m = mv[:, None] & mk[None, :]
    if SR:
        rbits = sr_bits8(seed, offs_v[:, None] * ((K + 7) // 8) + tl.arange(0, BK // 8)[None, :], c1, c2, TAG)
    else:
        rbits = None
    if FMT == fcode.FP32:
        tl.store(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], S, mask=m)
    elif FMT == fcode.NVFP4:
        K2 = K // 2
        K16 = K // 16
        o2 = tl.arange(0, BK // 2)
        o16 = tl.arange(0, BK // 16)
        codes, sb = nvfp4_encode(S, s_enc, SR, rbits)
        tl.store(p0 + sh * V * K2 + offs_v[:, None] * K2 + o2[None, :], codes,
                 mask=mv[:, None] & (o2 < K2)[None, :])
        tl.store(p1 + sh * V * K16 + offs_v[:, None] * K16 + o16[None, :], sb,
                 mask=mv[:, None] & (o16 < K16)[None, :])
    elif is_rowscaled(FMT):   # whole rows: each row's scale from its amax over K, then codes
        store_row_tile(S, p0, p1, sh, offs_v, offs_k, mv, mk, K, V, FMT, SR, rbits)
    else:
        bits = encode_bits(S, FMT, SR, rbits)
        ptrs = p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :]
        tl.store(ptrs, bits.to(p0.dtype.element_ty), mask=m)


@triton.jit
def _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP: tl.constexpr, FMT_LP: tl.constexpr):
    """Store the (slot, head) NVFP4 encode scale of each checkpoint kept in nvfp4."""
    if FMT_HP == fcode.NVFP4:
        tl.store(hp2 + sh, s_enc)
    if FMT_LP == fcode.NVFP4:
        tl.store(lp2 + sh, s_enc)


@triton.jit
def key_row(row, head, HV, HG: tl.constexpr):
    """Index of (``row``, ``head``)'s key head in a tensor of ``[.., HV // HG, ..]`` key heads: ``HG`` value heads
    share one key (``SSMStateCache.key_group``; 1: every head its own). The caller's ``row`` is int64."""
    if HG == 1:   # the index the kernels had before shared keys: they compile as they did
        return row * HV + head
    else:
        return row * (HV // HG) + head // HG


@triton.jit
def _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K: tl.constexpr, BK: tl.constexpr,
                      GK: tl.constexpr, DELTA: tl.constexpr, bhk=None):
    """The current input of row-head ``bh`` in fp32: q, k [BK]; log decay g as a [BK] vector and (GK = 1)
    the scalar gts (else 0); beta (0 without the delta rule). ``bhk``: the row's key head (k ``[B, HK, K]``,
    :func:`key_row`; None: ``bh``). Returns (q, kt, gt, gts, beta)."""
    if bhk is None:
        bhk = bh
    # every load is issued before the first cast: Triton converts a 16-bit input's layout through shared memory at
    # its cast (a block barrier that waits for the load), and a load after that barrier would start only once the
    # earlier one has arrived: a second memory round trip in a batch-1 step's chain
    q_in = tl.load(q_ptr + bh * K + offs_k, mask=mk, other=0.0)
    k_in = tl.load(k_ptr + bhk * K + offs_k, mask=mk, other=0.0)
    if GK == 1:
        g_in = tl.load(g_ptr + bh)
    else:
        g_in = tl.load(g_ptr + bh * K + offs_k, mask=mk, other=0.0)
    if DELTA:
        beta = tl.load(beta_ptr + bh).to(tl.float32)
    else:
        beta = 0.0
    q = q_in.to(tl.float32)
    kt = k_in.to(tl.float32)
    if GK == 1:
        gts = g_in.to(tl.float32)
        gt = gts + tl.zeros([BK], dtype=tl.float32)
    else:
        gts = 0.0
        gt = g_in.to(tl.float32)
    return q, kt, gt, gts, beta


@triton.jit
def _vec4(offs):
    """``offs`` (an arange) written so that the compiler sees runs of 4 contiguous elements, not more: loads
    through it are at most 4 elements wide, so a 16-bit ring tile gets the layout of the fp32 tiles it is
    reduced with (8-wide bf16 loads gave the ring tiles a layout of their own, converted through shared memory:
    gdn fp32 non-flush with a bf16 ring, AOT sm_90a, 34 -> 50 LDS and 37 -> 53 STS per program)."""
    return (offs // 4) * 4 + offs % 4


@triton.jit
def _scale_from_amax(amax, gmax):
    """:func:`_read_scale`'s exponent from ``amax`` = max |x| (fp32 scalar) and ``gmax`` = max gamma."""
    e = (amax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    eg = (gmax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    return tl.minimum(tl.minimum(132 - e, 133 - eg), 7)


@triton.jit
def _max_pair(a0, b0, a1, b1):
    """Combine of a two-operand max reduction (:func:`_read_scales`): tl.max's combine on each operand."""
    return tl.maximum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def _read_scale(x, gmax):
    """Power-of-two scaling 2**s of a scaled non-flush reduction's input ``x = gamma * v`` fp32 ``[BK]`` (v = q or
    k, the whole key row; ``gmax`` = max gamma): int32 scalar ``s = min(132 - e, 133 - e_gamma, 7)``, ``e`` the
    biased exponent of max |x|. The scaled input ``x' = (gamma 2**s) v`` then has max |.| < 2**6 and
    ``gamma 2**s`` < 2**7 (no overflow), and its products are below 2**3 with the nvfp4 read copy's E2M1 values
    times 2**-6 (:func:`.rounding.nvfp4_raw`), below 2**15 with the row-scaled codes' values (|q| <= 448). An inf
    gives s = -123; a NaN's s is the max's NaN handling (the backend's), and the products carry it either way."""
    return _scale_from_amax(tl.max(tl.abs(x), 0), gmax)


@triton.jit
def _decay_max(gam_row, gam_head, GK: tl.constexpr):
    """``gmax`` of :func:`_read_scales`: the max of the checkpoint's decay over the key row ``gam_row`` ``[BK]``;
    where the decay is per head (``GK`` = 1) its scalar ``gam_head``, with no reduction."""
    if GK == 1:
        return gam_head
    else:
        return tl.max(gam_row, 0)


@triton.jit
def _read_scales(xq, xk, gmax, DELTA: tl.constexpr):
    """:func:`_read_scale` of ``xq = gamma q`` and (``DELTA``) ``xk = gamma k`` (fp32 ``[BK]``), both maxima in one
    reduction (one exchange between warps, not two: at batch 1 each is a step of the program's one dependent
    chain). Returns ``(s_q, s_k)`` (``s_k = s_q`` without the delta rule)."""
    if DELTA:
        aq, ak = tl.reduce((tl.abs(xq), tl.abs(xk)), 0, _max_pair)
        return _scale_from_amax(aq, gmax), _scale_from_amax(ak, gmax)
    else:
        sq = _read_scale(xq, gmax)
        return sq, sq


@triton.jit
def _nvfp4_chunk_sums(raw, SB, xs, NKC: tl.constexpr):
    """Per key chunk of ``NKC`` (``KC = C // NKC``, a multiple of 16): ``sum_b s_b sum_{k in b} raw_k xs_k``
    over the chunk's 16-element blocks b -> fp32 ``[R, NKC]``. ``raw`` ``[R, C]`` (:func:`.rounding.nvfp4_raw`),
    ``SB`` ``[R, C // 16]`` block scales, ``xs`` ``[C]`` the scaled input (:func:`_read_scale`)."""
    R: tl.constexpr = raw.shape[0]
    C: tl.constexpr = raw.shape[1]
    NB: tl.constexpr = C // 16 // NKC
    p = tl.sum(tl.reshape(raw * xs[None, :], (R, NKC, NB, 16)), 3)               # [R, NKC, NB] block sums
    return tl.sum(p * tl.reshape(SB, (R, NKC, NB)), 2)


@triton.jit
def _read_unscale(acc, f, s, SHIFT: tl.constexpr):
    """The scaled read's row sums ``acc`` back to the read copy's values: the products carried 2**-SHIFT (nvfp4:
    6, the E2M1 values of :func:`.rounding.nvfp4_raw`; row-scaled: 0) and 2**s (the scaled input,
    :func:`_read_scale`), so ``((acc * f) 2**c) 2**d`` with c + d = SHIFT - s: ``f`` = ``1 / s_enc`` (nvfp4, a
    scalar) or the rows' decode scales d (row-scaled, like ``acc``); two power-of-two steps in [-4, 65], each a
    normal fp32."""
    t = SHIFT - s
    c = t >> 1
    return ((acc * f) * pow2_f32(c)) * pow2_f32(t - c)
