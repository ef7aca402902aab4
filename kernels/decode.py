"""The generic Triton decode-step kernel: conventional, replay (Algorithm 1) and dual (Algorithm 3).

One kernel for the three families, specialised by constexprs: ``DELTA`` (gdn,
kda: delta rule with correction u_t), ``GK`` (1: one decay per head, mamba2 and
gdn; K: per-key decay, kda), the storage formats ``FMT_HP`` / ``FMT_LP`` (codes
of :data:`.rounding.FORMAT_CODE`), ``SHARED`` (one checkpoint), ``SR``
(stochastic rounding into the recurrence checkpoint) and ``TAG`` (Philox stream:
0 replay/dual flush, 1 conventional write). Conventional decoding is the window
``L = 1`` case: every step is a flush. The torch reference with the same
operation order is :mod:`.reference`; the flush semantics are written there.

Grid ``(cdiv(V, BV), HV, B)``: one program per (V-block, head, row) reads its
``[BV, K]`` tile of the checkpoint once; the V-blocks of one (row, head) are
adjacent in launch order (their shared ring tiles come from L2). Every row of the state is independent
(the delta-rule correction of row i only needs row i of S), so V can be split
freely. NVFP4's second-level scale needs the amax of the whole (slot, head)
state at a flush: on a flush row the ``pv == 0`` program flushes the whole head
in two passes (amax, then encode; S_L is rebuilt deterministically twice) and
the row's other V-block programs do nothing. Flushes work on sub-blocks of
``BVF`` rows to keep registers low. Heads are expanded by the caller (inputs
arrive ``[B, HV, ...]``).

Every load that does not depend on the slot's ring count ``h`` is issued before
``h`` is used: the read-copy tile and all ``L - 1`` ring entries are loaded
speculatively (wasted on the flush step, whose own re-reads then hit L2), and
entries ``j >= h`` are dropped with ``tl.where`` (stale entries may hold
anything). Per program, non-flush step (ring holds ``h`` entries, ``h + 1 < L``):
reads the read copy tile once and computes ``S_lp (gamma_{1:t} * q)`` and, for the
delta rule, ``S_lp (gamma_{1:t} * k)`` in the same pass; the ring terms come from
``[L-1, K]`` / ``[L-1, BV]`` tiles (decays exp(G_t - G_j) from the cumulative
log decays the ring keeps). Flush step: reads the recurrence tile, builds S_L in registers
(chunked form; delta rule: shared specs use the ring's cached corrections
(Algorithm 1), separate specs recompute them from S_hp (Algorithm 3)), writes
the recurrence tile (and the read tile when separate).
All arithmetic in fp32; activations may be bf16/fp16 (converted after load).

The fused kernel's program is :func:`_step_program`. Split step (large replay grids, :func:`launch_config`):
:func:`_nonflush_kernel` handles the non-flush rows (one program per (row, head): the ring is read once and
only its live entries), :func:`_flush_rows_kernel` lists the flush rows and the persistent
:func:`_flush_kernel` runs ``_step_program`` (``FLUSH_ONLY``) over their work items, the two flush launches on a
side stream concurrent with the non-flush launch (:func:`flush_side_stream`); all before the counter advance
(docs/KERNELS.md "Split flush"). nvfp4 checkpoints at small batches: :func:`_nvfp4_part_kernel` lists the rows
instead and, when few flush, runs pass 1 of their flush in sub-block items (:func:`nvfp4_flush_parts`).
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .reference import block_k, cached_corrections, flush_entries, nonflush_kc, replay_flush_rows
from .rounding import (FORMAT_CODE, decode_bits, encode_bits, nvfp4_amax, nvfp4_block_scale, nvfp4_decode,
                       nvfp4_encode, nvfp4_encode_scale, nvfp4_raw, pow2_f32, sr_bits8)


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
    if FMT == 0:
        S = tl.load(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], mask=m, other=0.0)
    elif FMT == 5:
        codes, sb = _load_nvfp4_parts(p0, p1, sh, offs_v, mv, K, V, BK, K0)
        s_enc = tl.load(p2 + sh)
        S = nvfp4_decode(codes, sb, s_enc, not VALUES)
        if not VALUES:
            S = tl.where(m, S, 0.0)
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
def _load_read(p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, FMT: tl.constexpr, BK: tl.constexpr, K0=0):
    """A non-flush step's read-copy tile ``[BV, BK]`` (key columns ``offs_k = K0 + arange(0, BK)``) as
    :func:`_read_rowdot` takes it: ``(S, SB)``. nvfp4: ``S`` the E2M1 values times 2**-126
    (:func:`.rounding.nvfp4_raw`), ``SB`` the block scales s_b fp32 ``[BV, BK // 16]``; other formats: the
    decoded values (:func:`_load_tile`, ``VALUES``) and ``SB = S`` (unused)."""
    if FMT == 5:
        codes, sb = _load_nvfp4_parts(p0, p1, sh, offs_v, mv, K, V, BK, K0)
        return nvfp4_raw(codes), nvfp4_block_scale(sb)
    else:
        S = _load_tile(p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, FMT, BK, True, K0)
        return S, S


@triton.jit
def _read_scale(x, gmax):
    """Power-of-two scaling 2**s of an nvfp4 non-flush reduction's input ``x = gamma * v`` fp32 ``[BK]`` (v = q or
    k, the whole key row; ``gmax`` = max gamma): int32 scalar ``s = min(252 - e, 253 - e_gamma, 127)``, ``e`` the
    biased exponent of max |x|. The scaled input ``x' = (gamma 2**s) v`` then has max |.| < 2**126 and
    ``gamma 2**s`` < 2**127 (no overflow), and for |x| >= 2**-2 its products with the E2M1 values times 2**-126 are
    of order 1 (no subnormals; smaller x are not scaled up further). A NaN or inf gives s = -3 (it propagates)."""
    e = (tl.max(tl.abs(x), 0).to(tl.int32, bitcast=True) >> 23) & 0xFF
    eg = (gmax.to(tl.int32, bitcast=True) >> 23) & 0xFF
    return tl.minimum(tl.minimum(252 - e, 253 - eg), 127)


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
def _nvfp4_unscale(acc, inv, s):
    """The chunk sums' total ``acc`` back to the read copy's values: the products carried 2**-126 (the raw
    E2M1 values) and 2**s (the scaled input), so ``((acc / s_enc) 2**c) 2**d`` with c + d = 126 - s
    (``inv = 1 / s_enc``; two power-of-two steps in [-1, 65], each a normal fp32)."""
    t = 126 - s
    c = t >> 1
    return ((acc * inv) * pow2_f32(c)) * pow2_f32(t - c)


@triton.jit
def _store_tile(S, p0, p1, p2, sh, offs_v, offs_k, mv, mk, K, V, seed, c1, c2, s_enc,
                FMT: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr, BK: tl.constexpr):
    """Round the fp32 tile S [BV, BK] into format FMT (SR: element (v, k) takes half k % 2 of word (k % 8) // 2
    of Philox(seed, v * ceil(K / 8) + k // 8, c1, c2, TAG), :func:`.rounding.sr_bits8`). nvfp4: ``s_enc`` is
    the head's encode scale (stored by the caller). ``offs_k`` is ``arange(0, BK)``."""
    m = mv[:, None] & mk[None, :]
    if SR:
        rbits = sr_bits8(seed, offs_v[:, None] * ((K + 7) // 8) + tl.arange(0, BK // 8)[None, :], c1, c2, TAG)
    else:
        rbits = None
    if FMT == 0:
        tl.store(p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :], S, mask=m)
    elif FMT == 5:
        K2 = K // 2
        K16 = K // 16
        o2 = tl.arange(0, BK // 2)
        o16 = tl.arange(0, BK // 16)
        codes, sb = nvfp4_encode(S, s_enc, SR, rbits)
        tl.store(p0 + sh * V * K2 + offs_v[:, None] * K2 + o2[None, :], codes,
                 mask=mv[:, None] & (o2 < K2)[None, :])
        tl.store(p1 + sh * V * K16 + offs_v[:, None] * K16 + o16[None, :], sb,
                 mask=mv[:, None] & (o16 < K16)[None, :])
    else:
        bits = encode_bits(S, FMT, SR, rbits)
        ptrs = p0 + sh * V * K + offs_v[:, None] * K + offs_k[None, :]
        tl.store(ptrs, bits.to(p0.dtype.element_ty), mask=m)


@triton.jit
def _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP: tl.constexpr, FMT_LP: tl.constexpr):
    """Store the (slot, head) NVFP4 encode scale of each checkpoint kept in nvfp4."""
    if FMT_HP == 5:
        tl.store(hp2 + sh, s_enc)
    if FMT_LP == 5:
        tl.store(lp2 + sh, s_enc)


@triton.jit
def _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, mf, mk, K, V,
                       seed, fc, s_enc, FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr,
                       SR: tl.constexpr, TAG: tl.constexpr, BK: tl.constexpr):
    """Flush-step rows ``offs_f`` of the committed state S [BVF, BK]: write their output S q, then
    the two independent casts (recurrence: SR if asked; read copy: RNE, only when separate)."""
    o = tl.sum(S * q[None, :], 1)
    tl.store(out_ptr + bh * V + offs_f, o, mask=mf)
    _store_tile(S, hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, seed, sh, fc, s_enc, FMT_HP, SR, TAG, BK)
    if not SHARED:
        _store_tile(S, lp0, lp1, lp2, sh, offs_f, offs_k, mf, mk, K, V, seed, sh, fc, s_enc, FMT_LP, False, TAG, BK)


@triton.jit
def _seq_step(S, a, kv, vv, beta, DELTA: tl.constexpr):
    """S <- S diag(a); u = beta (v - S k) (delta) or v; S <- S + u k^T. Returns (S, u)."""
    S = S * a[None, :]
    if DELTA:
        r = tl.sum(S * kv[None, :], 1)
        u = beta * (vv - r)
    else:
        u = vv
    S = S + u[:, None] * kv[None, :]
    return S, u


@triton.jit
def _conventional_rows(hp0, hp1, hp2, v_ptr, sh, bh, at, kt, beta, offs_f, mf, offs_k, mk, K: tl.constexpr,
                       V: tl.constexpr, DELTA: tl.constexpr, FMT_HP: tl.constexpr, BK: tl.constexpr):
    """fp32 rows ``offs_f`` of a conventional step (L = 1, no ring): one sequential step from the checkpoint."""
    vf = tl.load(v_ptr + bh * V + offs_f, mask=mf, other=0.0).to(tl.float32)
    S = _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
    S, ut = _seq_step(S, at, kt, vf, beta, DELTA)
    return S


@triton.jit
def _tf32_split(x):
    """fp32 ``x`` -> ``(hi, lo)``: ``hi`` = x rounded to the nearest TF32 value (10 mantissa bits; +-inf and NaN
    kept), ``lo = x - hi`` (exact), as Triton's own ``"tf32x3"`` splits its operands."""
    hi = ((x.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    hi = tl.where(tl.abs(x) < float("inf"), hi, x)
    return hi, x - hi


@triton.jit
def _dot_tf32x3(a, b_hi, b_lo, A_EXACT: tl.constexpr):
    """``a @ b`` to about fp32 accuracy from TF32 tensor-core products, ``b`` given split (:func:`_tf32_split`,
    done once by the caller for all its sub-blocks): ``a_lo b_hi + a_hi b_lo + a_hi b_hi``, small terms first.
    ``A_EXACT``: ``a`` holds TF32 values already (a tile decoded from a 16- or 8-bit checkpoint), so
    ``a_lo = 0``: two products and no split of ``a``. Triton's ``input_precision="tf32x3"`` splits both operands
    at every call. (The interpreter computes each product in fp32.)"""
    if A_EXACT:
        acc = tl.dot(a, b_lo, input_precision="tf32")
        a_hi = a
    else:
        a_hi, a_lo = _tf32_split(a)
        acc = tl.dot(a_lo, b_hi, input_precision="tf32")
        acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
    return tl.dot(a_hi, b_hi, acc, input_precision="tf32")


@triton.jit
def _flush_prep(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, offs_k, mk,
                K: tl.constexpr, L: tl.constexpr, LP: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
                BK: tl.constexpr, LPLOG: tl.constexpr, CACHED: tl.constexpr, DOTP: tl.constexpr = "ieee"):
    """Per-(row, head) terms of the chunked flush over the L inputs (ring entries 0..L-2, the current
    input as entry L-1; padded with zeros to LP >= 16 entries). With Gc_j the cumulative log decays (the
    ring's entries, then Gc_{L-1} = G_{L-2} + g_t, repeated on the padded entries; d_{i+1:j} = exp(Gc_j - Gc_i)):

    Kd [LP, BK] = k_j * d_{1:j}; Kd2 [LP, BK] = k_j * d_{j+1:L}; dL [BK] = d_{1:L};
    (delta rule) br [LP] betas and T = (I + M diag(br))^{-1} [LP, LP] with M[i, j] = sum_k k_i k_j d_{i+1:j}
    for i < j (else 0), so that the corrections of a row are U = ((v - P) * br) T with P = S_hp Kd^T;
    T is the product (I - N)(I + N^2)(I + N^4)...(I + N^(LP/2)), N = M diag(br) (nilpotent: N^LP = 0).

    ``CACHED`` (delta rule, shared spec: Algorithm 1): no M, T, betas (the corrections u_0..u_{L-2} are the
    ring's cached ones); instead kdl [BK] = k_{L-1} d_{1:L} (= row L-1 of Kd) and cl [LP] = Kd2_j . k_{L-1}
    (j < L-1, else 0), so that the current correction is u_{L-1} = beta (v - S_hp kdl - U cl).
    Returns (Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl) (unused entries are placeholders; ``DOTP`` = ``"tf32x3"``: Kd
    and Kd2 are their TF32 parts, Kdl and Kd2l the remainders, :func:`_tf32_split`). ``DOTP``: the input precision
    of the fp32 dots (:func:`flush_dot_precision`).
    """
    offs_j = tl.arange(0, LP)
    mring = offs_j < L - 1
    cur = offs_j == L - 1
    ej = ring0 + offs_j
    Kr = tl.load(rk_ptr + ej[:, None] * K + offs_k[None, :], mask=mring[:, None] & mk[None, :],
                 other=0.0).to(tl.float32)
    Kr = tl.where(cur[:, None], kt[None, :], Kr)
    if GK == 1:
        gtot = tl.load(rg_ptr + ring0 + L - 2) + gts                            # Gc_{L-1}
        Gc = tl.where(mring, tl.load(rg_ptr + ej, mask=mring, other=0.0), gtot)    # [LP]
        Kd = Kr * tl.exp(Gc)[:, None]
        Kd2 = Kr * tl.exp(gtot - Gc)[:, None]
        dL = tl.exp(gtot + tl.zeros([BK], dtype=tl.float32))
    else:
        gtot = tl.load(rg_ptr + (ring0 + L - 2) * GK + offs_k, mask=mk, other=0.0) + gt      # Gc_{L-1} [BK]
        Gr = tl.load(rg_ptr + ej[:, None] * GK + offs_k[None, :], mask=mring[:, None] & mk[None, :], other=0.0)
        Gc = tl.where(mring[:, None], Gr, gtot[None, :])                        # [LP, BK]
        Kd = Kr * tl.exp(Gc)
        Kd2 = Kr * tl.exp(gtot[None, :] - Gc)
        dL = tl.exp(gtot)
    T = tl.zeros([LP, LP], dtype=tl.float32)
    br = tl.zeros([LP], dtype=tl.float32)
    kdl = dL
    cl = br
    if CACHED:
        kdl = kt * dL
        cl = tl.where(mring, tl.sum(Kd2 * kt[None, :], 1), 0.0)
    elif DELTA:
        br = tl.load(rb_ptr + ej, mask=mring, other=0.0)
        br = tl.where(cur, beta, br)
        M = tl.zeros([LP, LP], dtype=tl.float32)
        upper = offs_j[:, None] < offs_j[None, :]
        if GK == 1:
            # M = (Kr Kr^T) * exp(Gc_j - Gc_i): one small fp32 dot
            Dm = tl.exp(tl.minimum(Gc[None, :] - Gc[:, None], 0.0))
            M = tl.where(upper, tl.dot(Kr, tl.trans(Kr), input_precision=DOTP) * Dm, 0.0)
        else:
            # per-key decays: row i of M = sum_k k_i[k] k_j[k] exp(Gc_j[k] - Gc_i[k]) (no exp(+-Gc) factoring:
            # that could overflow). k_i and Gc_i re-read from the ring (L1 hits), rows built as columns of
            # M^T: no cross-warp extraction or layout change per step.
            MT = tl.zeros([LP, LP], dtype=tl.float32)
            for i in tl.range(0, L, loop_unroll_factor=1):
                inring = i < L - 1
                ki = tl.load(rk_ptr + (ring0 + i) * K + offs_k, mask=mk & inring, other=0.0).to(tl.float32)
                ki = tl.where(inring, ki, kt)                                    # k_i [BK]
                gci = tl.load(rg_ptr + (ring0 + i) * GK + offs_k, mask=mk & inring, other=0.0)
                gci = tl.where(inring, gci, gtot)                                # Gc_i [BK]
                row = tl.sum(Kr * tl.exp(tl.minimum(Gc - gci[None, :], 0.0)) * ki[None, :], 1)
                MT = tl.where((offs_j > i)[:, None] & (offs_j == i)[None, :], row[:, None], MT)
            M = tl.trans(MT)
        # T = (I + N)^{-1}, N = M diag(beta) strictly upper triangular [LP, LP] (LP = 2^LPLOG), so N^LP = 0 and
        # T = sum_k (-N)^k = (I - N)(I + N^2)(I + N^4)...(I + N^(LP/2)): LP = 16: six 16x16 fp32 dots
        # (no serial column loop)
        N = M * br[None, :]
        eye = tl.where(offs_j[:, None] == offs_j[None, :], 1.0, 0.0)
        T = eye - N
        Np = N
        for s in tl.static_range(1, LPLOG):            # Np = N^(2^s); T <- T (I + Np)
            Np = tl.dot(Np, Np, input_precision=DOTP)
            T = tl.dot(T, eye + Np, input_precision=DOTP)
    if DOTP == "tf32x3":   # the sub-blocks' key operands, split once per (row, head) (:func:`_dot_tf32x3`)
        Kd, Kdl = _tf32_split(Kd)
        Kd2, Kd2l = _tf32_split(Kd2)
    else:
        Kdl = Kd
        Kd2l = Kd2
    return Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl


@triton.jit
def _flush_chunk(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl,
                 cl, beta, offs_f, mf, offs_k, mk, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, LP: tl.constexpr,
                 DELTA: tl.constexpr, FMT_HP: tl.constexpr, BK: tl.constexpr, UMODE: tl.constexpr,
                 CACHED: tl.constexpr, S0p, PRE: tl.constexpr, DOTP: tl.constexpr):
    """fp32 S_L of rows ``offs_f`` ([BVF, BK]) from the recurrence checkpoint, chunked form, one pass over
    the tile, S_L = S_hp * d_{1:L} + U Kd2 with the corrections U [BVF, LP]:

    * ``CACHED`` (delta rule, shared spec, Algorithm 1): u_0..u_{L-2} are the ring's cached corrections (computed
      on the non-flush steps from this same checkpoint), u_{L-1} = beta (v - S_hp kdl - U cl) (one row
      reduction over the tile): one fp32 IEEE dot;
    * separate spec (Algorithm 3): recomputed from S_hp, P = S_hp Kd^T, U = ((V - P) * beta) T, i.e.
      u_j = beta_j (v_j - P_j - sum_{i<j} M_ij u_i) = beta_j (v_j - a_j S_{j-1} k_j): three fp32 IEEE dots;
    * mamba2: U = V.

    ``UMODE`` (delta rule, nvfp4 two-pass flush): 1 also saves U (recomputed: entries 0..L-2 into the ring's
    u slots, dead after a flush; cached: they are there already; entry L-1 into the output row, overwritten
    later), 2 reloads that U instead of computing it again (bit-identical values). ``PRE``: ``S0p`` is the
    recurrence tile of these rows, already loaded by the caller (the flush launch's sub-block prefetch).
    ``DOTP``: the input precision of the fp32 dots (:func:`flush_dot_precision`)."""
    offs_j = tl.arange(0, LP)
    mring = offs_j < L - 1
    last = (offs_j == L - 1)[None, :]
    uptr = ru_ptr + (ring0 + offs_j)[None, :] * V + offs_f[:, None]
    if UMODE == 2:
        S0 = S0p if PRE else _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
        U = tl.load(uptr, mask=mf[:, None] & mring[None, :], other=0.0)
        ul = tl.load(out_ptr + bh * V + offs_f, mask=mf, other=0.0)
        U = tl.where(last, ul[:, None], U)
    elif CACHED:
        S0 = S0p if PRE else _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
        U = tl.load(uptr, mask=mf[:, None] & mring[None, :], other=0.0)         # cached u_0..u_{L-2}
        vf = tl.load(v_ptr + bh * V + offs_f, mask=mf, other=0.0).to(tl.float32)
        ul = beta * (vf - (tl.sum(S0 * kdl[None, :], 1) + tl.sum(U * cl[None, :], 1)))   # u_{L-1}
        if UMODE == 1:
            tl.store(out_ptr + bh * V + offs_f, ul, mask=mf)
        U = tl.where(last, ul[:, None], U)
    else:
        vf = tl.load(v_ptr + bh * V + offs_f, mask=mf, other=0.0).to(tl.float32)
        Vr = tl.load(rv_ptr + (ring0 + offs_j)[None, :] * V + offs_f[:, None], mask=mf[:, None] & mring[None, :],
                     other=0.0).to(tl.float32)
        Vr = tl.where(last, vf[:, None], Vr)                                     # [BVF, LP]
        S0 = S0p if PRE else _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
        if DELTA:
            if DOTP == "tf32x3":
                # FMT_HP 1..4 (bf16, fp16, fp8, e5m2: FORMAT_CODE): the decoded tile holds TF32 values
                P = _dot_tf32x3(S0, tl.trans(Kd), tl.trans(Kdl), FMT_HP >= 1 and FMT_HP <= 4)   # [BVF, LP]
            else:
                P = tl.dot(S0, tl.trans(Kd), input_precision=DOTP)               # [BVF, LP]
            U = tl.dot((Vr - P) * br[None, :], T, input_precision=DOTP)        # [BVF, LP]
            if UMODE == 1:
                tl.store(uptr, U, mask=mf[:, None] & mring[None, :])
                tl.store(out_ptr + bh * V + offs_f[:, None] + offs_j[None, :] * 0, U, mask=mf[:, None] & last)
        else:
            U = Vr
    if DOTP == "tf32x3":
        S = S0 * dL[None, :] + _dot_tf32x3(U, Kd2, Kd2l, False)
    else:
        S = S0 * dL[None, :] + tl.dot(U, Kd2, input_precision=DOTP)
    return S


@triton.jit
def _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta,
             Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K: tl.constexpr, V: tl.constexpr,
             L: tl.constexpr, LP: tl.constexpr, DELTA: tl.constexpr,
             FMT_HP: tl.constexpr, BK: tl.constexpr, CACHED: tl.constexpr, UMODE: tl.constexpr = 0, S0p=None,
             PRE: tl.constexpr = False, DOTP: tl.constexpr = "ieee"):
    """S_L of rows ``offs_f``: conventional (L = 1) one sequential step, replay the chunked form (``PRE``: from
    the prefetched recurrence tile ``S0p``)."""
    if L == 1:
        S = _conventional_rows(hp0, hp1, hp2, v_ptr, sh, bh, at, kt, beta, offs_f, mf, offs_k, mk, K, V, DELTA,
                               FMT_HP, BK)
    else:
        S = _flush_chunk(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, Kd, Kdl, Kd2, Kd2l, dL, T, br,
                         kdl, cl, beta, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK,
                         UMODE if DELTA and L > 1 else 0, CACHED, S0p, PRE, DOTP)
    return S


@triton.jit
def _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K: tl.constexpr, BK: tl.constexpr,
                      GK: tl.constexpr, DELTA: tl.constexpr):
    """The current input of row-head ``bh`` in fp32: q, k [BK]; log decay g as a [BK] vector and (GK = 1)
    the scalar gts (else 0); beta (0 without the delta rule). Returns (q, kt, gt, gts, beta)."""
    q = tl.load(q_ptr + bh * K + offs_k, mask=mk, other=0.0).to(tl.float32)
    kt = tl.load(k_ptr + bh * K + offs_k, mask=mk, other=0.0).to(tl.float32)
    if GK == 1:
        gts = tl.load(g_ptr + bh).to(tl.float32)
        gt = gts + tl.zeros([BK], dtype=tl.float32)
    else:
        gts = 0.0
        gt = tl.load(g_ptr + bh * K + offs_k, mask=mk, other=0.0).to(tl.float32)
    if DELTA:
        beta = tl.load(beta_ptr + bh).to(tl.float32)
    else:
        beta = 0.0
    return q, kt, gt, gts, beta


@triton.jit
def _vec4(offs):
    """``offs`` (an arange) written so that the compiler sees runs of 4 contiguous elements, not more: loads
    through it are at most 4 elements wide, so a 16-bit ring tile gets the layout of the fp32 tiles it is
    reduced with (8-wide bf16 loads gave the ring tiles a layout of their own, converted through shared memory:
    gdn fp32 non-flush with a bf16 ring, AOT sm_90a, 34 -> 50 LDS and 37 -> 53 STS per program)."""
    return (offs // 4) * 4 + offs % 4


@triton.jit
def _load_ring_keys(rk_ptr, rg_ptr, ej, mrow, offs_k, mk, K: tl.constexpr, GK: tl.constexpr):
    """Ring entries ``ej`` [L1P] (rows where ``mrow`` is false read as 0): keys [L1P, BK] and log decays
    ([L1P], or [L1P, BK] when GK = K)."""
    Kr = tl.load(rk_ptr + ej[:, None] * K + _vec4(offs_k)[None, :], mask=mrow[:, None] & mk[None, :],
                 other=0.0).to(tl.float32)
    if GK == 1:
        gr = tl.load(rg_ptr + ej, mask=mrow, other=0.0)
    else:
        gr = tl.load(rg_ptr + ej[:, None] * GK + offs_k[None, :], mask=mrow[:, None] & mk[None, :], other=0.0)
    return Kr, gr


@triton.jit
def _current_log_decay(Gr, offs_j, h, gt, gts, GK: tl.constexpr, BK: tl.constexpr):
    """G_t = G_{h-1} + g_t, the current input's cumulative log decay (its ring entry), G_{h-1} picked from the
    ring's ``Gr`` ([L1P], or [L1P, BK] when GK = K; 0 when h = 0). Returns (``Gt`` [BK], ``Gts``: for GK = 1 the
    scalar, else 0). The split non-flush kernel picks the scalar so too (loading it again let the compiler keep
    the ring tiles live across the chunk loop: mamba2 nvfp4/fp16 non-flush step 213.6 -> 197.4 us at B = 256),
    but loads kda's row h - 1 directly (the cross-warp pick over ``[L1P, BK]`` cost kda 4-6%;
    reports/bench/sweeps_2026-11-30e/pick_b256.md)."""
    if GK == 1:
        Gts = tl.sum(tl.where(offs_j == h - 1, Gr, 0.0), 0) + gts
        Gt = Gts + tl.zeros([BK], dtype=tl.float32)
    else:
        Gt = tl.sum(tl.where((offs_j == h - 1)[:, None], Gr, 0.0), 0) + gt
        Gts = 0.0
    return Gt, Gts


@triton.jit
def _ring_coeffs(Kr, Gr, q, kt, Gt, Gts, GK: tl.constexpr):
    """Ring terms of a non-flush step. ``Kr`` [L1P, BK] ring keys and ``Gr`` their cumulative log decays
    ([L1P], or [L1P, BK] when GK = K), both zero at the entries j >= h; ``Gt`` [BK] (and for GK = 1 the scalar
    ``Gts``) the current input's, G_t = G_{h-1} + g_t. The decay from entry j to now is exp(G_t - G_j).
    Returns ``cq``, ``ck`` [L1P] (the entries' decayed key products with q_t and k_t); the checkpoint's decay
    gamma_{1:t} = exp(G_t) is the caller's (a [BK] vector in the fused kernel, a scalar or per-chunk slices in the
    split one)."""
    if GK == 1:
        dec = tl.exp(Gts - Gr)                                               # [L1P]
        cq = tl.sum(Kr * q[None, :], 1) * dec
        ck = tl.sum(Kr * kt[None, :], 1) * dec
    else:
        dec = tl.exp(Gt[None, :] - Gr)
        cq = tl.sum(Kr * dec * q[None, :], 1)
        ck = tl.sum(Kr * dec * kt[None, :], 1)
    return cq, ck


@triton.jit
def _chunks_in_order(p):
    """``[R, NKC]`` per-key-chunk row sums (NKC in 1, 2, 4) -> ``[R]``, added in chunk order starting from zero:
    (((0 + p0) + p1) + p2) + p3, as the split launch accumulates them chunk by chunk."""
    R: tl.constexpr = p.shape[0]
    NKC: tl.constexpr = p.shape[1]
    acc = tl.zeros([R], dtype=tl.float32)
    if NKC == 1:
        acc += tl.reshape(p, (R,))
    elif NKC == 2:
        p0, p1 = tl.split(p)
        acc += p0
        acc += p1
    else:
        tl.static_assert(NKC == 4, "_chunks_in_order: 1, 2 or 4 chunks")
        e, o = tl.split(tl.reshape(p, (R, 2, 2)))          # e = (p0, p2), o = (p1, p3)
        p0, p2 = tl.split(e)
        p1, p3 = tl.split(o)
        acc += p0
        acc += p1
        acc += p2
        acc += p3
    return acc


@triton.jit
def _read_rowdot(S, SB, inv, gam, v, NV4R: tl.constexpr):
    """``sum_k S[r, k] gam[k] v[k]`` of a read-copy tile ``[R, BK]`` (:func:`_load_read`; ``gam``, ``v`` ``[BK]``) in
    the non-flush order: the sums of the ``BK // KC`` (<= 4) K chunks of ``KC = max(16, BK // 4)``
    (:func:`.reference.nonflush_kc`), added in chunk order (:func:`_chunks_in_order`). ``NV4R`` (an nvfp4 read
    copy): ``S`` holds the E2M1 values times 2**-126 and ``SB`` the block scales; each chunk sums its blocks'
    ``s_b sum raw x'`` with the input scaled by a power of two, ``x' = (gam 2**s) v`` (:func:`_read_scale`), and the
    total is divided by ``s_enc`` (``inv = 1 / s_enc``) and unscaled (:func:`_nvfp4_unscale`): two multiplies per
    element fewer than decoding the values first, and the exact values q s_b / s_enc enter the products."""
    R: tl.constexpr = S.shape[0]
    BK: tl.constexpr = S.shape[1]
    KC: tl.constexpr = BK // 4 if BK >= 64 else 16
    NKC: tl.constexpr = BK // KC
    if NV4R:
        s = _read_scale(gam * v, tl.max(gam, 0))
        acc = _chunks_in_order(_nvfp4_chunk_sums(S, SB, (gam * pow2_f32(s)) * v, NKC))
        return _nvfp4_unscale(acc, inv, s)
    else:
        return _chunks_in_order(tl.sum(tl.reshape(S * (gam * v)[None, :], (R, NKC, KC)), 2))


@triton.jit
def _nonflush_rows(S, SB, inv, Ur, cq, ck, gam, q, kt, vt, beta, DELTA: tl.constexpr, NV4R: tl.constexpr):
    """Output rows of a non-flush step from the read-copy tile ``S``, ``SB`` [BV, BK] (:func:`_load_read`;
    ``inv = 1 / s_enc`` for an nvfp4 one, ``NV4R``) and the ring's corrections
    (mamba2: raw inputs) ``Ur`` [L1P, BV] (zero at j >= h): o = S (gam q) + sum_j u_j cq_j + u_t (k_t . q_t)
    with u_t = beta (v_t - S (gam k_t) - sum_j u_j ck_j) (delta rule) or v_t. Returns (o, u_t), [BV] each."""
    acc_q = tl.sum(Ur * cq[:, None], 0)                                       # [BV]
    acc_q = acc_q + _read_rowdot(S, SB, inv, gam, q, NV4R)
    if DELTA:
        acc_k = tl.sum(Ur * ck[:, None], 0) + _read_rowdot(S, SB, inv, gam, kt, NV4R)
        u = beta * (vt - acc_k)
    else:
        u = vt
    o = acc_q + u * tl.sum(kt * q, 0)
    return o, u


@triton.jit
def _append_rows(ru_ptr, rv_ptr, eh, u, vt, offs_v, mv, V: tl.constexpr, DELTA: tl.constexpr,
                 CACHED: tl.constexpr):
    """Append the V rows ``offs_v`` of the current input as ring entry ``eh``: the correction u_t (delta
    rule) and, where the flush needs it (mamba2, separate delta-rule specs), the raw v_t in the ring's input
    dtype (``SSMStateCache.ring_dtype``)."""
    if DELTA:
        tl.store(ru_ptr + eh * V + offs_v, u, mask=mv)
    if not CACHED:
        tl.store(rv_ptr + eh * V + offs_v, vt.to(rv_ptr.dtype.element_ty), mask=mv)   # (exact: an input)


@triton.jit
def _append_keys(rk_ptr, rg_ptr, rb_ptr, eh, kt, Gt, beta, offs_k, mk, lead, K: tl.constexpr,
                 GK: tl.constexpr, DELTA: tl.constexpr, CACHED: tl.constexpr):
    """Append k_t, the cumulative log decay G_t ([BK]; GK = 1: its element 0) and (where the flush recomputes
    the corrections) beta_t as ring entry ``eh``; only the ``lead`` program of a (row, head) writes them. k_t goes
    in the ring's input dtype (``SSMStateCache.ring_dtype``: the caller's activations, held exactly)."""
    tl.store(rk_ptr + eh * K + offs_k, kt.to(rk_ptr.dtype.element_ty), mask=mk & lead)   # (exact: an input)
    if GK == 1:
        tl.store(rg_ptr + eh + offs_k, Gt, mask=(offs_k == 0) & lead)
    else:
        tl.store(rg_ptr + eh * GK + offs_k, Gt, mask=mk & lead)
    if DELTA and not CACHED:
        tl.store(rb_ptr + eh + offs_k, beta + tl.zeros(offs_k.shape, dtype=tl.float32), mask=(offs_k == 0) & lead)


@triton.jit
def _decode_step_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
    hp0, hp1, hp2, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    NV4: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    CACHED: tl.constexpr, DOTP: tl.constexpr,
):
    """The fused step (every row, flush or not) and conventional decoding: grid ``(cdiv(V, BV), HV, B)``, one
    program per (V-block, head, row) (:func:`_step_program`). The V-block programs of one (row, head) are
    adjacent in launch order, so the ring tiles they share are read from DRAM once (L2 hits for the others)."""
    _step_program(tl.program_id(0), tl.program_id(1), tl.program_id(2), q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2,
                  rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed, HV, K, V, L, L1, L1P, LP,
                  LPLOG, BK, BV, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR, TAG, CACHED, False,
                  out_ptr, False, False, DOTP)


@triton.jit
def _flush_rows_kernel(idx_ptr, cnt_ptr, rows_ptr, nrows_ptr, B, L: tl.constexpr, BLOCK: tl.constexpr):
    """Split step: the list of the rows that flush this step (slot >= 0, h + 1 >= L), in row order, into
    ``rows[0:n]`` and its length n into ``nrows[0]``. One program, BLOCK rows at a time (prefix sums)."""
    n = 0
    start = 0
    while start < B:   # (a range() with a runtime bound fails in the Triton 3.6 interpreter)
        offs, fl = _flush_row_flags(idx_ptr, cnt_ptr, start, B, L, BLOCK)
        tl.store(rows_ptr + n + tl.cumsum(fl, 0) - 1, offs, mask=fl > 0)
        n += tl.sum(fl, 0)
        start += BLOCK
    tl.store(nrows_ptr, n)


@triton.jit
def _flush_item(
    w, IPH: tl.constexpr, BVI: tl.constexpr, rows_ptr,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
    hp0, hp1, hp2, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    NV4: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    CACHED: tl.constexpr, scr, FPRE: tl.constexpr, SCRATCH: tl.constexpr, DOTP: tl.constexpr,
):
    """Work item ``w`` of the flush launch, ``IPH`` items of ``BVI`` rows of V per (flush row, head): the
    ``w % IPH``-th V-block of head ``(w / IPH) % HV`` of the ``w / (HV IPH)``-th listed flush row."""
    b = tl.load(rows_ptr + w // (HV * IPH))
    _step_program(w % IPH, (w // IPH) % HV, b, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
                  lp0, lp1, lp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed, HV, K, V, L, L1, L1P,
                  LP, LPLOG, BK, BVI, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR, TAG, CACHED, True, scr,
                  FPRE, SCRATCH, DOTP)


@triton.jit
def _flush_kernel(
    rows_ptr, nrows_ptr,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
    hp0, hp1, hp2, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    NV4: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    CACHED: tl.constexpr, NVB: tl.constexpr, scr_ptr, FPRE: tl.constexpr, SCRATCH: tl.constexpr,
    DOTP: tl.constexpr, NV4PARTS: tl.constexpr = 0, amx_ptr=None,
):
    """Split step, flush launch (FLUSH_ONLY): a persistent grid of a few programs per SM loops over the work
    items (flush row, head, V-block) of the rows listed by :func:`_flush_rows_kernel`, each handled like the
    fused grid's program (``NVB`` V-blocks per head; 1 for an nvfp4 checkpoint, whose flush needs the whole
    head's amax: the item is the fused grid's ``pv == 0`` program, which flushes the whole head). On the L - 1
    of L steps where a slot group does not flush the list is empty and the launch is a few microseconds (a
    full grid of programs that each read their row's slot and ring count and exit cost ~60 us per step at
    batch 256 on the H200). ``FPRE``, ``SCRATCH``: :func:`_step_program` (``scr_ptr``: ``[programs, NVF * BVF,
    BK]`` fp32).

    Few flush rows (slots whose ring positions are spread, as in serving: about B / L rows flush per step) would
    leave most of the grid idle while each item's program walks its ``BV // BVF`` sub-blocks one after another.
    So (not nvfp4) when the whole-head items would fill at most half of the programs, the items are ``FBV`` rows:
    single ``BVF``-row sub-blocks of 32 rows or more, pairs of 16-row ones. Each recomputes the per-(row, head)
    flush terms (the same values, so the same results), which pays only when programs would otherwise idle. With
    every row flushing at batch >= 16 the whole-head items fill the grid. Pairs of 16-row sub-blocks: with a
    constant single iteration the compiler interleaves the per-(row, head) terms with the sub-block's loads, and
    at the 128-register cap the kernel spilled 204 bytes (gdn fp32, AOT sm_90a; with pairs 0, as without the
    small items); single 32-row sub-blocks (fp16 checkpoints on the GPU) do not spill. H200, staggered flushes,
    reports/bench/sweeps_2026-12-01c/item32_b*.md: gdn fp16 at B = 16 23.1 us per step with 64-row items, 18.5
    with 32-row ones; mamba2 fp16 (V = 64: no small items before) 26.6 -> 22.9.

    ``NV4PARTS`` (two-pass nvfp4 flush with the S_L scratch, :func:`nvfp4_flush_parts`): with few flush rows (the
    same test) the previous launch, :func:`_nvfp4_part_kernel`, has done pass 1 of the flushing heads in items of
    one ``BVF``-row sub-block (S_L and its amax into scratch); pass 2, one sub-block per item
    (:func:`_nvfp4_commit_item`), is this launch's (2) or the next one's (1, :func:`_nvfp4_commit_kernel`)."""
    FBV: tl.constexpr = BVF if BVF >= 32 else 2 * BVF   # rows of a small item (above)
    SMALL: tl.constexpr = (not NV4) and BV > FBV
    n = tl.load(nrows_ptr) * (HV * NVB)
    small = 2 * n <= tl.num_programs(0)
    if NV4PARTS > 0:
        if small:
            n = 0
            if NV4PARTS == 2:
                m = _nvfp4_part_items(tl.load(nrows_ptr), HV, NVF)
                w = tl.program_id(0)
                while w < m:
                    _nvfp4_commit_item(w, rows_ptr, q_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2, fcnt_ptr,
                                       scr_ptr, amx_ptr, seed, HV, K, V, BK, BVF, NVF, FMT_HP, FMT_LP, SHARED, SR, TAG)
                    w += tl.num_programs(0)
    if SMALL:
        if small:
            n *= BV // FBV
    w = tl.program_id(0)
    scr = scr_ptr + w.to(tl.int64) * (NVF * BVF * BK)
    if (not SMALL) or (not small):
        while w < n:   # (a range() with a loaded bound fails in the Triton 3.6 interpreter)
            _flush_item(w, NVB, BV, rows_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
                        lp0, lp1, lp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed, HV, K, V, L, L1,
                        L1P, LP, LPLOG, BK, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR, TAG, CACHED, scr,
                        FPRE, SCRATCH, DOTP)
            w += tl.num_programs(0)
    else:
        while w < n:
            _flush_item(w, NVB * (BV // FBV), FBV, rows_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
                        hp0, hp1, hp2, lp0, lp1, lp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed,
                        HV, K, V, L, L1, L1P, LP, LPLOG, BK, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR,
                        TAG, CACHED, scr, FPRE, SCRATCH, DOTP)
            w += tl.num_programs(0)


@triton.jit
def _nvfp4_part_items(nrows, HV, NVF: tl.constexpr):
    """Work items of the nvfp4 sub-block passes (:func:`_nvfp4_part_kernel`, ``NV4PARTS`` in :func:`_flush_kernel`)
    for ``nrows`` flush rows: ``NVF`` per (flush row, head) when the (row, head) pairs would fill at most half of the
    grid (the small-items test of :func:`_flush_kernel`), else 0."""
    nh = nrows * HV
    return tl.where(2 * nh <= tl.num_programs(0), nh * NVF, 0)


@triton.jit
def _nvfp4_commit_kernel(
    rows_ptr, nrows_ptr, q_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2, fcnt_ptr, scr_ptr, amx_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
):
    """Pass 2 of the few-flush-rows nvfp4 flush (:func:`_nvfp4_commit_item`) as a launch of its own, after
    :func:`_flush_kernel` (``NV4PARTS`` = 1; same grid, so the same small-items test); otherwise it exits at once."""
    m = _nvfp4_part_items(tl.load(nrows_ptr), HV, NVF)
    w = tl.program_id(0)
    while w < m:
        _nvfp4_commit_item(w, rows_ptr, q_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2, fcnt_ptr, scr_ptr,
                           amx_ptr, seed, HV, K, V, BK, BVF, NVF, FMT_HP, FMT_LP, SHARED, SR, TAG)
        w += tl.num_programs(0)


@triton.jit
def _nvfp4_part_item(
    w, b,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    GK: tl.constexpr, DELTA: tl.constexpr, FMT_HP: tl.constexpr, CACHED: tl.constexpr, scr_ptr, amx_ptr,
    DOTP: tl.constexpr,
):
    """Few flush rows, nvfp4 checkpoint: pass 1 of the two-pass flush spread over the grid
    (:func:`_nvfp4_part_kernel`). Item ``w`` (:func:`_nvfp4_part_items`) is the ``w % NVF``-th ``BVF``-row
    sub-block of (listed flush row ``b``, head) ``rh = w / NVF``: it builds the per-(row, head) flush terms (the
    same values in every item of a head), S_L of its rows (as the whole-head pass 1 of :func:`_step_program`), and
    stores them in the (row, head)'s scratch ``scr_ptr[rh]`` (``[NVF * BVF, BK]`` fp32) and their amax in
    ``amx_ptr[w]``; :func:`_nvfp4_commit_item` encodes them. With whole-head items only the
    (row, head) pairs would work, each walking its ``NVF`` sub-blocks in series twice (H200, gdn nvfp4/fp16, one
    flush row per step at B = 16: 86.7 us per step)."""
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    rh = w // NVF
    head = rh % HV
    bh = b.to(tl.int64) * HV + head
    sh = tl.load(idx_ptr + b).to(tl.int64) * HV + head     # (listed rows have a slot)
    ring0 = sh * L1
    q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K, BK, GK, DELTA)
    Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_prep(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta,
                                                         offs_k, mk, K, L, LP, GK, DELTA, BK, LPLOG, CACHED, DOTP)
    offs_f = (w % NVF) * BVF + tl.arange(0, BVF)
    S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, tl.exp(gt), kt, beta, Kd, Kdl,
                 Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, offs_f < V, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK,
                 CACHED, 0, DOTP=DOTP)
    tl.store(scr_ptr + rh.to(tl.int64) * (NVF * BVF * BK) + offs_f[:, None] * BK + offs_k[None, :], S)
    tl.store(amx_ptr + w, nvfp4_amax(S))


@triton.jit
def _flush_row_flags(idx_ptr, cnt_ptr, start, B, L: tl.constexpr, BLOCK: tl.constexpr):
    """Rows ``start + arange(BLOCK)`` of a split step: (offsets, 1 where the row flushes this step (slot >= 0,
    h + 1 >= L), else 0)."""
    offs = start + tl.arange(0, BLOCK)
    m = offs < B
    slot = tl.load(idx_ptr + offs, mask=m, other=-1).to(tl.int64)
    h = tl.load(cnt_ptr + tl.maximum(slot, 0), mask=m, other=0)
    return offs, (m & (slot >= 0) & (h + 1 >= L)).to(tl.int32)


@triton.jit
def _nvfp4_part_kernel(
    rows_ptr, nrows_ptr, B,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
    hp0, hp1, hp2, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    NV4: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    CACHED: tl.constexpr, scr_ptr, amx_ptr, DOTP: tl.constexpr, BLOCK: tl.constexpr,
):
    """Split step, nvfp4 checkpoint, in place of :func:`_flush_rows_kernel`: every program lists the rows that flush
    this step (program 0 stores the list, ``rows[0:n]``, ``nrows[0] = n``, for :func:`_flush_kernel`), and when few
    rows flush (the (row, head) pairs fill at most half of the grid, the small-items test of :func:`_flush_kernel`:
    same grid) runs pass 1 of their flush in sub-block items (:func:`_nvfp4_part_item`), each finding
    its row in the list again; :func:`_flush_kernel` then runs pass 2 (``NV4PARTS``). A launch of its own: folded into
    :func:`_flush_kernel`, pass 1 spread over the whole-head path's registers (AOT sm_90a, gdn nvfp4/fp16 at the
    128-register cap: 5 -> 15 spill loads per sub-block of the whole-head amax pass; H200, B = 256, flush step
    1285 -> 1356 us), and with the listing inside, the step has no more launches than with whole-head items."""
    pid = tl.program_id(0)
    n = 0
    start = 0
    while start < B:   # (a range() with a runtime bound fails in the Triton 3.6 interpreter)
        offs, fl = _flush_row_flags(idx_ptr, cnt_ptr, start, B, L, BLOCK)
        tl.store(rows_ptr + n + tl.cumsum(fl, 0) - 1, offs, mask=(fl > 0) & (pid == 0))
        n += tl.sum(fl, 0)
        start += BLOCK
    if pid == 0:
        tl.store(nrows_ptr, n)
    m = _nvfp4_part_items(n, HV, NVF)
    w = pid
    while w < m:
        i = w // (NVF * HV)   # the item's place in the list -> its row (a scan per item: the list program 0
        # writes is not visible to the other programs of this launch)
        b = 0
        c = 0
        start = 0
        while start < B:
            offs, fl = _flush_row_flags(idx_ptr, cnt_ptr, start, B, L, BLOCK)
            b += tl.sum(tl.where((fl > 0) & (c + tl.cumsum(fl, 0) == i + 1), offs, 0), 0)
            c += tl.sum(fl, 0)
            start += BLOCK
        _nvfp4_part_item(w, b, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
                         rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, HV, K, V, L, L1, LP, LPLOG, BK, BVF, NVF, GK,
                         DELTA, FMT_HP, CACHED, scr_ptr, amx_ptr, DOTP)
        w += tl.num_programs(0)


@triton.jit
def _nvfp4_commit_item(
    w, rows_ptr, q_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2, fcnt_ptr, scr_ptr, amx_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
):
    """Pass 2 of the few-flush-rows nvfp4 flush (:func:`_flush_kernel`, ``NV4PARTS``, after
    :func:`_nvfp4_part_kernel`), item ``w`` = the ``w % NVF``-th ``BVF``-row sub-block of (listed flush row, head)
    ``w / NVF``: the head's encode scale from the ``NVF`` amaxes of its pass-1 items, then the sub-block's S_L
    rows from the scratch -> outputs and both casts (:func:`_commit_flush_rows`); sub-block 0 stores the head's
    scale."""
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    rh = w // NVF
    r = w % NVF
    head = rh % HV
    b = tl.load(rows_ptr + rh // HV)
    bh = b.to(tl.int64) * HV + head
    slot = tl.load(idx_ptr + b).to(tl.int64)
    sh = slot * HV + head
    amax = 0.0   # in sub-block order, as the whole-head pass
    for i in tl.static_range(NVF):
        amax = tl.maximum(amax, tl.load(amx_ptr + rh * NVF + i))
    s_enc = nvfp4_encode_scale(amax)
    offs_f = r * BVF + tl.arange(0, BVF)
    S = tl.load(scr_ptr + rh.to(tl.int64) * (NVF * BVF * BK) + offs_f[:, None] * BK + offs_k[None, :])
    q = tl.load(q_ptr + bh * K + offs_k, mask=mk, other=0.0).to(tl.float32)
    _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, offs_f < V, mk, K, V,
                       seed, tl.load(fcnt_ptr + slot), s_enc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
    if r == 0:
        _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP, FMT_LP)


@triton.jit
def _step_program(
    pv, head, b,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
    hp0, hp1, hp2, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    NV4: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    CACHED: tl.constexpr, FLUSH_ONLY: tl.constexpr, scr_ptr=None, FPRE: tl.constexpr = False,
    SCRATCH: tl.constexpr = False, DOTP: tl.constexpr = "ieee",
):
    """One (V-block ``pv``, head, row ``b``) of a decode step: the fused step's program, or (FLUSH_ONLY) a
    work item of the split step's flush launch, which may also use (:func:`flush_config`): ``FPRE``, load the
    recurrence tile of the next flush sub-block before this one is computed (and the first one before the
    per-(row, head) flush terms); ``SCRATCH`` (nvfp4 two-pass flush), pass 1 keeps the fp32 S_L rows in the
    program's ``[NVF * BVF, BK]`` scratch at ``scr_ptr`` and pass 2 reloads them instead of recomputing S_L
    (same values). ``DOTP``: input precision of the flush's fp32 dots (:func:`flush_dot_precision`)."""
    # FLUSH_ONLY (replay, L > 1): a work item of the split step's flush launch (_flush_kernel, after
    # _nonflush_kernel): only flush rows are handled (a non-flush row reads h and writes nothing; no
    # speculative non-flush loads). All launches of a step run before the counter advance, so they read the
    # same ring counts h. The split is exact because the rows of one step have distinct slots (validated in
    # SSMStateCache.step; the bench and the decode sessions never repeat a slot in one step) and a program
    # reads and writes only its own row's slot (checkpoints, ring entries, flush counter), its own output row
    # and the read-only inputs; a row is handled entirely by the non-flush or by the flush launch (flush iff
    # h + 1 >= L), so they touch disjoint slots and output rows and their order does not matter.
    offs_v = pv * BV + tl.arange(0, BV)
    mv = offs_v < V
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    bh = b.to(tl.int64) * HV + head
    slot = tl.load(idx_ptr + b).to(tl.int64)
    # every load that does not depend on the ring count h is issued before h is used (a padded row
    # reads slot 0 and discards it): the chain is idx -> {h, read-copy tile, whole ring, inputs}
    sh = tl.maximum(slot, 0) * HV + head
    ring0 = sh * L1
    h = tl.load(cnt_ptr + tl.maximum(slot, 0))
    q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K, BK, GK, DELTA)
    vt = tl.load(v_ptr + bh * V + offs_v, mask=mv, other=0.0).to(tl.float32)
    if L > 1 and not FLUSH_ONLY:
        # speculative non-flush loads (wasted on the 1-in-L flush step; L2 hits for its own re-reads):
        # the read-copy tile and ALL L-1 ring entries (allocated for every slot); validity j < h is
        # applied to the loaded values with tl.where (stale entries may hold anything, NaN included)
        S_nf, SB_nf = _load_read(lp0, lp1, lp2, sh, offs_v, offs_k, mv, mk, K, V, FMT_LP, BK)
        if FMT_LP == 5:
            inv_nf = tl.math.div_rn(1.0, tl.load(lp2 + sh))
        else:
            inv_nf = 1.0
        offs_j = tl.arange(0, L1P)
        mr = offs_j < L1
        ej = ring0 + offs_j
        Kr_nf, g_nf = _load_ring_keys(rk_ptr, rg_ptr, ej, mr, offs_k, mk, K, GK)
        if DELTA:
            Ur_nf = tl.load(ru_ptr + ej[:, None] * V + offs_v[None, :], mask=mr[:, None] & mv[None, :], other=0.0)
        else:
            Ur_nf = tl.load(rv_ptr + ej[:, None] * V + _vec4(offs_v)[None, :], mask=mr[:, None] & mv[None, :],
                            other=0.0).to(tl.float32)
    at = tl.exp(gt)
    if slot < 0:
        if not FLUSH_ONLY:   # padded row: zero output (written by the fused or the non-flush launch)
            tl.store(out_ptr + bh * V + offs_v, tl.zeros([BV], dtype=tl.float32), mask=mv)
    else:
        if h + 1 >= L:
            # ---- flush: S_hp + ring -> S_L in registers (corrections: cached for shared delta-rule specs,
            # recomputed from S_hp for separate ones) -> both checkpoints.
            # Rows are independent: tiles are processed in sub-blocks of BVF rows (fewer registers).
            fc = tl.load(fcnt_ptr + slot)
            if FPRE and not NV4:   # the first sub-block's recurrence tile, before the per-(row, head) terms
                offs_n = pv * BV + tl.arange(0, BVF)
                S0n = _load_tile(hp0, hp1, hp2, sh, offs_n, offs_k, offs_n < V, mk, K, V, FMT_HP, BK)
            if L > 1:   # per-(row, head) terms of the chunked flush, shared by the sub-blocks
                Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_prep(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta,
                                                                     offs_k, mk, K, L, LP, GK, DELTA, BK, LPLOG,
                                                                     CACHED, DOTP)
            else:
                Kd = kt
                Kdl = kt
                Kd2 = kt
                Kd2l = kt
                T = kt
                dL = at
                br = at
                kdl = at
                cl = at
            if NV4:
                # nvfp4 needs the amax of the whole (slot, head) state: the pv == 0 program flushes the
                # whole head in two passes (amax, then encode), recomputing S_L (deterministic).
                if NVF == 1 and pv == 0:
                    # the whole head fits one sub-block: one pass, S_L stays in registers
                    offs_f = tl.arange(0, BVF)
                    mf = offs_f < V
                    S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta, Kd, Kdl,
                                 Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK,
                                 CACHED, DOTP=DOTP)
                    s_enc = nvfp4_encode_scale(nvfp4_amax(S))
                    _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, mf, mk, K, V,
                                       seed, fc, s_enc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
                    _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP, FMT_LP)
                elif pv == 0:
                    amax = 0.0
                    for r in tl.range(0, NVF, loop_unroll_factor=1):
                        offs_f = r * BVF + tl.arange(0, BVF)
                        mf = offs_f < V
                        S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta, Kd,
                                     Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA,
                                     FMT_HP, BK, CACHED, 0 if SCRATCH else 1, DOTP=DOTP)
                        if SCRATCH:
                            tl.store(scr_ptr + offs_f[:, None] * BK + offs_k[None, :], S)
                        amax = tl.maximum(amax, nvfp4_amax(S))
                    s_enc = nvfp4_encode_scale(amax)
                    tl.debug_barrier()   # pass 1's saved corrections / S_L rows are visible to every thread of pass 2
                    for r in tl.range(0, NVF, loop_unroll_factor=1):
                        offs_f = r * BVF + tl.arange(0, BVF)
                        mf = offs_f < V
                        if SCRATCH:
                            S = tl.load(scr_ptr + offs_f[:, None] * BK + offs_k[None, :])
                        else:
                            S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta,
                                         Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP,
                                         DELTA, FMT_HP, BK, CACHED, 2, DOTP=DOTP)
                        _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, mf, mk, K, V,
                                           seed, fc, s_enc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
                    _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP, FMT_LP)
            else:
                for r in tl.range(0, BV // BVF, loop_unroll_factor=1):
                    offs_f = pv * BV + r * BVF + tl.arange(0, BVF)
                    mf = offs_f < V
                    if FPRE:   # this sub-block's tile was loaded one iteration ahead; issue the next one's
                        S0 = S0n
                        offs_n = offs_f + BVF
                        S0n = _load_tile(hp0, hp1, hp2, sh, offs_n, offs_k, (offs_n < V) & (r + 1 < BV // BVF), mk,
                                         K, V, FMT_HP, BK)
                    else:
                        S0 = dL   # (unused)
                    S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta, Kd, Kdl,
                                 Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK,
                                 CACHED, 0, S0, FPRE, DOTP)
                    _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, mf, mk, K, V,
                                       seed, fc, 1.0, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
        elif L > 1:
            if not FLUSH_ONLY:   # constexpr: the flush launch contains no non-flush code
                # ---- non-flush: output from the read copy + ring; append the current input.
                mj = offs_j < h
                Kr = tl.where(mj[:, None], Kr_nf, 0.0)
                Ur = tl.where(mj[:, None], Ur_nf, 0.0)
                if GK == 1:
                    Gr = tl.where(mj, g_nf, 0.0)                                     # [L1P]
                else:
                    Gr = tl.where(mj[:, None], g_nf, 0.0)                            # [L1P, BK]
                Gt, Gts = _current_log_decay(Gr, offs_j, h, gt, gts, GK, BK)
                cq, ck = _ring_coeffs(Kr, Gr, q, kt, Gt, Gts, GK)
                o, u = _nonflush_rows(S_nf, SB_nf, inv_nf, Ur, cq, ck, tl.exp(Gt), q, kt, vt, beta, DELTA,
                                      FMT_LP == 5)
                tl.store(out_ptr + bh * V + offs_v, o, mask=mv)
                eh = ring0 + h
                _append_rows(ru_ptr, rv_ptr, eh, u, vt, offs_v, mv, V, DELTA, CACHED)
                _append_keys(rk_ptr, rg_ptr, rb_ptr, eh, kt, Gt, beta, offs_k, mk, pv == 0, K, GK, DELTA, CACHED)


@triton.jit
def _load_ring_rows(ru_ptr, rv_ptr, v_ptr, ej, mj, bh, offs_v, mv, V: tl.constexpr, DELTA: tl.constexpr):
    """The V rows ``offs_v`` of a non-flush step's ring terms: the live entries' corrections (mamba2: raw inputs)
    ``[L1P, BV]`` (0 where ``mj`` is false) and the current v_t ``[BV]`` in fp32."""
    if DELTA:
        Ur = tl.load(ru_ptr + ej[:, None] * V + offs_v[None, :], mask=mj[:, None] & mv[None, :], other=0.0)
    else:
        Ur = tl.load(rv_ptr + ej[:, None] * V + _vec4(offs_v)[None, :], mask=mj[:, None] & mv[None, :],
                     other=0.0).to(tl.float32)
    vt = tl.load(v_ptr + bh * V + offs_v, mask=mv, other=0.0).to(tl.float32)
    return Ur, vt


@triton.jit
def _chunk_factors(q_ptr, k_ptr, g_ptr, gp_ptr, has_prev, bh, gam, kc, mkc, pq, pk, K: tl.constexpr, GK: tl.constexpr,
                   DELTA: tl.constexpr, NV4R: tl.constexpr):
    """K chunk ``kc`` of gamma_{1:t} * q_t and (delta rule) gamma_{1:t} * k_t, fp32 ``[KC]``, from (cache-hit)
    reloads of the inputs in the chunk's layout. GK = 1: ``gam`` is the scalar decay; per-key decays (GK = K):
    the chunk of gamma_{1:t} = exp(G_{h-1} + g_t), G_{h-1} from the ring row at ``gp_ptr`` (0 unless
    ``has_prev``): the fused kernel's whole-row arithmetic, element by element. ``NV4R``: the scaled inputs of
    :func:`_read_rowdot`, ``(gamma pq) q`` and ``(gamma pk) k`` (``pq = 2**s_q``, ``pk = 2**s_k``)."""
    q = tl.load(q_ptr + bh * K + kc, mask=mkc, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + bh * K + kc, mask=mkc, other=0.0).to(tl.float32)
    if GK == 1:
        gamc = gam
    else:
        Gp = tl.load(gp_ptr + kc, mask=mkc & has_prev, other=0.0)
        gamc = tl.exp(Gp + tl.load(g_ptr + bh * K + kc, mask=mkc, other=0.0).to(tl.float32))
    return _product_inputs(gamc, q, k, pq, pk, DELTA, NV4R)


@triton.jit
def _product_inputs(gam, q, k, pq, pk, DELTA: tl.constexpr, NV4R: tl.constexpr):
    """The inputs of the read-copy products from gamma (a scalar or like ``q``), q and k: ``gamma q`` and (delta
    rule) ``gamma k``; ``NV4R``: scaled as :func:`_read_rowdot` does, ``(gamma pq) q`` and ``(gamma pk) k``.
    Returns ``(xq, xk)`` (``xk = xq`` without the delta rule)."""
    if NV4R:
        xq = (gam * pq) * q
        xk = (gam * pk) * k if DELTA else xq
    else:
        xq = gam * q
        xk = gam * k if DELTA else xq
    return xq, xk


@triton.jit
def _add_chunk_rowsums(acc_q, acc_k, S, SB, q_ptr, k_ptr, g_ptr, gp_ptr, has_prev, bh, gam, kc, mkc, pq, pk, xs_ptr,
                       K: tl.constexpr, BK: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
                       NV4R: tl.constexpr, XSCR: tl.constexpr):
    """Add key chunk ``kc`` of the read copy, ``S``, ``SB`` ``[BVA, KC]`` (:func:`_load_read`), to the row sums:
    ``acc_q += S_c (gamma q)_c`` and (delta rule) ``acc_k += S_c (gamma k)_c`` (``[BVA]`` each; gamma chunks:
    :func:`_chunk_factors`). ``NV4R`` (nvfp4 read copy): the chunk's block sums of :func:`_read_rowdot` with the
    whole key row's scalings ``pq = 2**s_q``, ``pk = 2**s_k`` (the caller unscales the totals). ``XSCR``: the
    chunk's inputs are loaded from the program's scratch row ``xs_ptr`` (``[2, BK]``: the q and k inputs of the
    whole row, the same values :func:`_chunk_factors` computes). Returns ``(acc_q, acc_k)``."""
    if XSCR:   # the row's inputs were computed once and parked in the program's scratch row (see the kernel)
        xq = tl.load(xs_ptr + kc)
        if DELTA:
            xk = tl.load(xs_ptr + BK + kc)
        else:
            xk = xq
    else:
        xq, xk = _chunk_factors(q_ptr, k_ptr, g_ptr, gp_ptr, has_prev, bh, gam, kc, mkc, pq, pk, K, GK, DELTA,
                                NV4R)
    if NV4R:
        R: tl.constexpr = S.shape[0]
        acc_q += tl.reshape(_nvfp4_chunk_sums(S, SB, xq, 1), (R,))
        if DELTA:
            acc_k += tl.reshape(_nvfp4_chunk_sums(S, SB, xk, 1), (R,))
    else:
        acc_q += tl.sum(S * xq[None, :], 1)
        if DELTA:
            acc_k += tl.sum(S * xk[None, :], 1)
    return acc_q, acc_k


@triton.jit
def _nonflush_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, xs_ptr,
    HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr, BK: tl.constexpr,
    BVA: tl.constexpr, KC: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr, FMT_LP: tl.constexpr,
    CACHED: tl.constexpr, PREFETCH: tl.constexpr, STAGES: tl.constexpr, XSCR: tl.constexpr,
):
    """First launch of a split replay step: the non-flush rows (and the padded rows' zero output).

    Grid ``(1, HV, B)``: a program handles one (row, head), all ``V`` rows at once (``BVA`` = next power of two),
    streaming the read copy in ``BK // KC`` key chunks ``[BVA, KC]`` (``KC`` = :func:`.reference.nonflush_kc`):
    the per-chunk row sums stay in the chunk's layout (a reduction within a warp), the ring terms are reduced
    once per (row, head) over the whole ``[L1P, BVA]`` ring tile, and the outputs and corrections are stored
    once; only the ``h`` live ring entries are read. ``STAGES`` = 0: the chunk loop is unrolled, the first chunk
    is loaded before ``h`` is known and with ``PREFETCH`` each next chunk is loaded before the current one is
    reduced; ``STAGES`` > 0: a loop software-pipelined over that many stages (asynchronous copies of the next
    chunks into shared memory; :func:`nonflush_config`). Either way the chunks' row sums are added in chunk
    order, as :func:`_read_rowdot` and :func:`.reference._chunked_npsum` add them.
    Per-key decays (kda): each chunk computes its own slice of gamma_{1:t} from the ring's last cumulative log
    decay (:func:`_chunk_factors`).
    ``XSCR`` (:func:`nonflush_input_scratch`): the inputs of the chunks' products, ``gamma q`` and ``gamma k``
    (nvfp4: scaled, :func:`_read_rowdot`), are computed once for the whole key row and stored in the program's
    scratch row ``xs_ptr + (b * HV + head) * 2 * BK`` (fp32 ``[2, BK]``); after a barrier each chunk loads its
    slice. Otherwise every thread recomputes the chunk's inputs for the columns it holds, in every chunk.
    Flush rows (``h + 1 >= L``) are left to the flush launches."""
    NKC: tl.constexpr = BK // KC
    head = tl.program_id(1)
    b = tl.program_id(2)
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    offs_v = tl.arange(0, BVA)
    mv = offs_v < V
    offs_c = tl.arange(0, KC)
    bh = b.to(tl.int64) * HV + head
    slot = tl.load(idx_ptr + b).to(tl.int64)
    sh = tl.maximum(slot, 0) * HV + head
    ring0 = sh * L1
    h = tl.load(cnt_ptr + tl.maximum(slot, 0))
    NV4R: tl.constexpr = FMT_LP == 5
    if STAGES == 0:   # the first chunk before h is known
        S_next, SB_next = _load_read(lp0, lp1, lp2, sh, offs_v, offs_c, mv, offs_c < K, K, V, FMT_LP, KC, 0)
    q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K, BK, GK, DELTA)
    if slot < 0:
        tl.store(out_ptr + bh * V + offs_v, tl.zeros([BVA], dtype=tl.float32), mask=mv)
    elif h + 1 < L:
        offs_j = tl.arange(0, L1P)
        mj = offs_j < h                     # h <= L - 2: only live entries are read
        ej = ring0 + offs_j
        Ur, vt = _load_ring_rows(ru_ptr, rv_ptr, v_ptr, ej, mj, bh, offs_v, mv, V, DELTA)
        Kr, Gr = _load_ring_keys(rk_ptr, rg_ptr, ej, mj, offs_k, mk, K, GK)
        gp_ptr = rg_ptr + (ring0 + h - 1) * GK   # kda: G_{h-1}, also reloaded by the chunks for their gamma slice
        if GK == 1:
            Gt, Gts = _current_log_decay(Gr, offs_j, h, gt, gts, GK, BK)
        else:
            Gt = tl.load(gp_ptr + offs_k, mask=mk & (h > 0), other=0.0) + gt
            Gts = 0.0
        cq, ck = _ring_coeffs(Kr, Gr, q, kt, Gt, Gts, GK)
        if DELTA:
            # the delta rule's ring terms now, added after the chunks (same order as _nonflush_rows): the ring tiles
            # are dead in the loop, no spills under the 128-register cap (H200, B = 256, non-flush us per step,
            # reports/bench/full_0468809/profile.md against full_c18137a/: gdn fp32 159.0 -> 147.4, kda 162.9 ->
            # 156.9, nvfp4/fp16 gdn 98.8 -> 96.5, kda 123.4 -> 118.4; mamba2, which did not spill, lost: nvfp4/fp16
            # 200.5 -> 215.1, so it keeps its ring tile for after the loop)
            ring_q = tl.sum(Ur * cq[:, None], 0)
            ring_k = tl.sum(Ur * ck[:, None], 0)
        gam = tl.exp(Gts)   # GK = 1: the checkpoint's decay, a scalar (kda: unused, its chunks compute their slices)
        if GK == 1:   # gamma over the key row (the scratch row's and the nvfp4 scalings' input)
            gam_row = gam
        else:
            gam_row = tl.exp(Gt)
        if NV4R:   # the power-of-two scalings of _read_rowdot, from the whole key row of gamma q and gamma k
            if GK == 1:
                gmax = gam
            else:
                gmax = tl.max(gam_row, 0)
            sq = _read_scale(gam_row * q, gmax)
            sk = _read_scale(gam_row * kt, gmax)
            pq = pow2_f32(sq)
            pk = pow2_f32(sk)
            inv = tl.math.div_rn(1.0, tl.load(lp2 + sh))
        else:
            pq = 1.0
            pk = 1.0
        xs = xs_ptr + bh * (2 * BK)
        if XSCR:   # the chunks' inputs, computed once for the whole key row
            xq_row, xk_row = _product_inputs(gam_row, q, kt, pq, pk, DELTA, NV4R)
            tl.store(xs + offs_k, xq_row)
            if DELTA:
                tl.store(xs + BK + offs_k, xk_row)
            tl.debug_barrier()   # the row is visible to every thread of the program
        # the chunks' row sums are added in chunk order (acc = ((p0 + p1) + p2) + p3, as _read_rowdot)
        acc_q = tl.zeros([BVA], dtype=tl.float32)
        acc_k = tl.zeros([BVA], dtype=tl.float32)
        if STAGES > 0:   # software-pipelined: the next chunks' loads go to shared memory (cp.async), no registers
            for c in tl.range(0, NKC, num_stages=STAGES):
                kc = c * KC + offs_c
                mkc = kc < K
                S, SB = _load_read(lp0, lp1, lp2, sh, offs_v, kc, mv, mkc, K, V, FMT_LP, KC, c * KC)
                acc_q, acc_k = _add_chunk_rowsums(acc_q, acc_k, S, SB, q_ptr, k_ptr, g_ptr, gp_ptr, h > 0, bh, gam,
                                                  kc, mkc, pq, pk, xs, K, BK, GK, DELTA, NV4R, XSCR)
        else:
            for c in tl.static_range(NKC):
                kc = c * KC + offs_c
                mkc = kc < K
                if PREFETCH or c == 0:
                    S = S_next
                    SB = SB_next
                else:
                    S, SB = _load_read(lp0, lp1, lp2, sh, offs_v, kc, mv, mkc, K, V, FMT_LP, KC, c * KC)
                if PREFETCH and c + 1 < NKC:    # the next chunk's loads before this chunk is reduced
                    S_next, SB_next = _load_read(lp0, lp1, lp2, sh, offs_v, kc + KC, mv, kc + KC < K, K, V, FMT_LP,
                                                 KC, (c + 1) * KC)
                acc_q, acc_k = _add_chunk_rowsums(acc_q, acc_k, S, SB, q_ptr, k_ptr, g_ptr, gp_ptr, h > 0, bh, gam,
                                                  kc, mkc, pq, pk, xs, K, BK, GK, DELTA, NV4R, XSCR)
        if NV4R:
            acc_q = _nvfp4_unscale(acc_q, inv, sq)
            if DELTA:
                acc_k = _nvfp4_unscale(acc_k, inv, sk)
        if DELTA:
            acc_q = ring_q + acc_q
            acc_k = ring_k + acc_k
            u = beta * (vt - acc_k)
        else:
            acc_q = tl.sum(Ur * cq[:, None], 0) + acc_q
            u = vt
        o = acc_q + u * tl.sum(kt * q, 0)
        tl.store(out_ptr + bh * V + offs_v, o, mask=mv)
        eh = ring0 + h
        _append_rows(ru_ptr, rv_ptr, eh, u, vt, offs_v, mv, V, DELTA, CACHED)
        _append_keys(rk_ptr, rg_ptr, rb_ptr, eh, kt, Gt, beta, offs_k, mk, True, K, GK, DELTA, CACHED)


def _int_knob(name: str, value, ok, allowed: str) -> int:
    """A launcher knob's ``value`` if it is an int (not a bool) for which ``ok(value)`` holds; else ValueError
    naming the knob, the value and what is ``allowed``."""
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise ValueError(f"{name}={value!r}: {allowed}")
    return value


def _num_sms(device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def _conventional_small_tile(cache) -> bool:
    """Conventional decoding of a 16-bit checkpoint with per-key decays (kda) or short heads (V <= 64, mamba2):
    4096-element tiles (:func:`choose_block_v`)."""
    return (cache.window == 1 and cache.spec.recur.bits_per_element == 16
            and (getattr(cache, "per_key", False) or cache.head_v <= 64))


def choose_block_v(cache, batch: int) -> int:
    """V-block size: the whole head on CPU; on GPU start from a [BV, BK] tile of 4096 fp32 elements for
    replay (BV = 32 for K = 128: 4 warps, <= 128 registers, 4 programs per SM; conventional 8192) and halve
    BV (min 8; replay 16, per-key decays 32)
    until the grid has >= 4 programs per SM. The ``block_v`` knob (bench ``--block-v``) overrides it."""
    V = cache.head_v
    full = triton.next_power_of_2(V)
    if getattr(cache, "block_v", None):
        return cache.block_v
    if cache.device.type != "cuda":
        return full
    bk = block_k(cache.head_k)
    # conventional (L = 1): 8192-element tiles, 8 warps, 64 registers (87% of copy bandwidth on the H200), but
    # 4096 for a 16-bit checkpoint with per-key decays or V <= 64 (H200, B = 256, conventional fp16 per step, 8192
    # -> 4096: kda 174.1 -> 169.7 us, mamba2 319.9 -> 302.1; gdn 170.6 -> 178.2: reports/bench/
    # sweeps_2026-11-30f/conv_cfg_b256.md)
    tile = 4096 if cache.window > 1 or _conventional_small_tile(cache) else 8192
    bv = min(full, max(8, tile // bk))
    target = 4 * _num_sms(cache.device)
    # replay: the flush's tl.dot needs >= 16 rows; per-key decays (kda): >= 32, every V-block program rebuilds
    # the ring's [L-1, K] decays (H200, batch 1, kda fp32 replay: 6.7 us at BV = 16, 6.0 at 32, 7.9 at 64;
    # gdn 5.7 / 5.9 / 7.0: reports/bench/sweeps_2026-11-30b/kda_b1.md)
    low = 8 if cache.window == 1 else (32 if getattr(cache, "per_key", False) else 16)
    while bv > low and batch * cache.num_heads * triton.cdiv(V, bv) < target:
        bv //= 2
    return bv


FLUSH_PROGRAMS_PER_SM = 4   # persistent flush launch of a split step: 4 warps x 128 registers fill an SM
REPLAY_MAXNREG = 128   # register cap of a large replay launch on the GPU (4 warps: 4 programs per SM)
CONVENTIONAL_SR8_MAXNREG = 80   # conventional 8-warp launch, SR into an 8-bit checkpoint: 3 programs per SM
CONVENTIONAL_NVFP4_MAXNREG = 128   # conventional nvfp4 head programs: 2 programs of 8 warps per SM (16 warps: 1)


def launch_config(cache, batch: int):
    """Block sizes of a launch for ``batch`` rows: ``(BV, BVF, num_warps, nvfp4, maxnreg, split)``.

    ``BV`` rows of V per program (:func:`choose_block_v`); ``BVF`` rows per flush sub-block
    (conventional: 32, nvfp4 the whole head in one pass; replay: :func:`.reference.replay_flush_rows`,
    default 16, on the GPU 32 for tiles of >= 8192 elements (8+ warps); at most BV, >= 16 for the flush's
    tl.dot); ``num_warps = max(BV, BVF) * BK / 1024`` in 4..16 (knob ``num_warps``).
    Conventional 16- and 8-bit checkpoints on the GPU: ``BVF = BV``, one sub-block per program (H200, B = 256,
    per step, 32-row sub-blocks -> one of 64 rows, reports/bench/sweeps_2026-11-30f/conv_cfg_b256.md: gdn fp16
    170.6 -> 163.5 us, fp8+sr 363.6 -> 352.2; kda fp8+sr 387.1 -> 366.4; mamba2 fp8+sr 695.6 -> 684.6; fp32 would
    lose: gdn 272.1 -> 309.8).
    ``maxnreg`` caps the registers per thread (None: no cap). Conventional launches run uncapped except 8-warp
    programs that round stochastically into an 8-bit checkpoint (:data:`CONVENTIONAL_SR8_MAXNREG`: the Philox
    bits and the 8-bit encode take gdn / kda to ~162 registers, one program per SM; H200, B = 256, per step
    uncapped / 128 / 80 registers, reports/bench/sweeps_2026-11-30e/conv_cap_b256.md: gdn fp8+sr 598 / 407 /
    364 us, kda 623 / 413 / 388, mamba2 695 / 726 / 696; fp32 and fp16 unchanged or slower capped) and large
    conventional nvfp4 grids (:data:`CONVENTIONAL_NVFP4_MAXNREG`: mamba2's 8-warp head programs need 168 registers
    uncapped, one per SM, 128 without spills, AOT sm_90a; H200, B = 256, nvfp4+sr per step uncapped / 128 / 96 / 64:
    1535 / 1074 / 1144 / 1149 us; 16-warp gdn / kda programs are held to 128 by the register file anyway: 621 /
    621 us, reports/bench/sweeps_2026-12-01e/conv_sr_cap_b256.md).
    The replay kernel's register count is set by its flush branch; uncapped, at BV = 32 / 4 warps (AOT for sm_90a with the launcher's 16-byte alignment)
    gdn fp32 needs 109 (4 programs per SM), nvfp4/fp16 146 and kda 155 (3 per SM). When the grid has more
    than 2 programs per SM, replay launches on the GPU get the cap :data:`REPLAY_MAXNREG` (4 programs of 4
    warps per SM; a few dozen bytes of spills in the flush branch) unless the ``maxnreg`` knob (bench
    ``--maxnreg``; 0 = no cap) says otherwise; small grids (batch 1) run uncapped (no spills).

    ``split`` (replay only): run the step as separate launches: the non-flush rows (:func:`_nonflush_kernel`:
    one program per (row, head) over all V rows, the read copy streamed in key chunks, the ring read once and
    only its live entries; no flush code; :func:`nonflush_config`), then the flush rows:
    listed on the device (:func:`_flush_rows_kernel`) and flushed by a persistent grid over their work items
    (:func:`_flush_kernel`: ``BVF``, ``num_warps`` and ``maxnreg`` above), so that a step where no row flushes
    costs two near-empty launches. Heuristic: split on the GPU when the grid has more than 8 programs per SM,
    every family and spec; fused otherwise (a launch costs ~3 us: mamba2 at batch 1, 512 programs, 9.5 us split
    vs 6.5 fused); the ``split_flush`` knob (bench ``--split-flush``; None = heuristic) forces it. Conventional (L = 1: every
    step is a flush) never splits.
    """
    V = cache.head_v
    BK = block_k(cache.head_k)
    BV = choose_block_v(cache, batch)
    nvfp4 = "nvfp4" in (cache.spec.read.name, cache.spec.recur.name)
    BVF = getattr(cache, "flush_block_v", None) or 32
    if nvfp4 and cache.window == 1 and not getattr(cache, "flush_block_v", None):
        BV = BVF = triton.next_power_of_2(V)   # conventional nvfp4: one program and one pass per head
    elif (cache.window == 1 and cache.device.type == "cuda" and cache.spec.recur.bits_per_element <= 16
          and not getattr(cache, "flush_block_v", None)):
        BVF = BV   # conventional 16- / 8-bit checkpoints: the whole V-block in one sub-block (see the docstring)
    BVF = min(BVF, triton.next_power_of_2(V)) if nvfp4 else min(BV, BVF)
    if cache.window > 1:   # the chunked flush: fp32 tl.dot (dims >= 16), row sub-blocks as the reference
        BV = max(BV, 16)
        BVF = replay_flush_rows(cache)
        if cache.device.type == "cuda" and not getattr(cache, "flush_block_v", None) and BV * BK >= 8192:
            BVF = 32   # 8+ warps: 32-row sub-blocks (GPU dots do not round like the CPU reference anyway)
        BVF = min(BVF, triton.next_power_of_2(V)) if nvfp4 else min(BVF, BV)
    if not nvfp4 and BV % BVF:
        raise ValueError(f"flush_block_v={BVF} must divide block_v={BV}")
    num_warps = max(4, min(16, max(BV, BVF) * BK // 1024))   # <= 32 state elements per thread
    if getattr(cache, "num_warps", None):   # knob (the fused and conventional launches)
        num_warps = _int_knob("num_warps", cache.num_warps, lambda x: x in (1, 2, 4, 8, 16, 32),
                              "a power of two from 1 to 32")
    maxnreg = getattr(cache, "maxnreg", None)
    large_grid = (cache.device.type == "cuda"
                  and batch * cache.num_heads * triton.cdiv(V, BV) > 2 * _num_sms(cache.device))
    large = cache.window > 1 and large_grid
    if maxnreg is None and large:
        maxnreg = REPLAY_MAXNREG
    if (maxnreg is None and cache.window == 1 and cache.device.type == "cuda" and num_warps == 8
            and cache.spec.sr and cache.spec.recur.bits_per_element == 8):
        maxnreg = CONVENTIONAL_SR8_MAXNREG
    if maxnreg is None and nvfp4 and cache.window == 1 and large_grid:
        maxnreg = CONVENTIONAL_NVFP4_MAXNREG
    split = getattr(cache, "split_flush", None)
    if split is None:
        # a second launch costs ~3 us: only grids of > 8 programs per SM (H200, mamba2 at batch 1, 512
        # programs: 9.5 us split vs 6.5 fused)
        split = large and batch * cache.num_heads * triton.cdiv(V, BV) > 8 * _num_sms(cache.device)
    split = cache.window > 1 and bool(split)
    return BV, BVF, num_warps, nvfp4, (maxnreg or None), split


def flush_config(cache, batch: int, launch=None) -> tuple[int, int, int, int | None, bool, bool, int, int | None]:
    """The split step's persistent flush launch (:func:`_flush_kernel`): ``(BVI, BVF, num_warps, maxnreg,
    prefetch, scratch, programs_per_sm, stages)``; ``launch``: :func:`launch_config`'s result for this batch, if
    the caller has it.

    ``BVF``: rows per flush sub-block, the launch's (:func:`launch_config`), but on the GPU 32 for a shared
    16-bit checkpoint (fp16, bf16) and for a 16-bit recurrence checkpoint under an nvfp4 read copy with V <= 64
    (mamba2: two sub-blocks per head; H200, B = 256, mamba2 nvfp4/fp16 flush step 1552 -> 1363 us, step 292.4 ->
    280.6, reports/bench/sweeps_2026-12-01/mamba2_fbv.md; not for an 8-bit one, nvfp4/fp8+sr 1843 -> 1905, nor
    V = 128, gdn nvfp4/fp16 1274 -> 1340, nv_flush_b256.md) unless the ``flush_block_v`` knob is set.
    ``stages`` (knob ``flush_stages``, :func:`flush_stages`): the flush launch's ``num_stages``, by default 1
    (no software pipeline: each sub-block's recurrence tile and ring rows are loaded straight into registers instead
    of being copied ahead into shared memory, which the sub-block's dot already loads heavily) unless a checkpoint
    is nvfp4 and the flush dots are IEEE (None: Triton's default; :func:`flush_dot_precision`). H200, B = 256, us
    per flush step / per step, default -> 1 stage (reports/bench/sweeps_2026-11-30f/fl_stages_b256.md): gdn fp32 474
    -> 444 / 189.7 -> 188.0, kda fp32 491 -> 462, mamba2 fp32 878 -> 864, gdn fp8+sr 624 -> 595, kda 618 -> 587;
    fp16 with 32-row sub-blocks (1 stage): gdn 485 -> 351 / 129.9 -> 121.5, kda 468 -> 356 / 137.5 -> 130.5, mamba2
    711 -> 640 / 227.4 -> 222.9; nvfp4 with IEEE dots mixed (gdn nvfp4+sr 1011 -> 1069, mamba2 2024 -> 1758): not
    changed.

    ``BVI``: rows of V per work item (not nvfp4; nvfp4: the whole head): the ``flush_item_v`` knob, default the
    whole head (next power of two; the per-(row, head) flush terms are computed once); a power of two, a multiple
    of the sub-block ``BVF``. ``num_warps``: ``BVF * BK / 1024`` in 4..16; ``maxnreg`` as the fused kernel's.
    ``prefetch`` (knob ``flush_prefetch``, default off; not nvfp4): the next sub-block's recurrence tile is loaded
    before this one is computed. ``scratch`` (knob ``flush_scratch``, default on; nvfp4 two-pass flushes only):
    S_L kept in fp32 scratch between the passes instead of recomputed. ``programs_per_sm``: size of the
    persistent grid (knob ``flush_programs``, default :data:`FLUSH_PROGRAMS_PER_SM`; it should not exceed what
    fits on an SM, or the programs that do not fit run after the others with the same share of the work).

    H200, flush step at B = 256 (reports/bench/sweeps_2026-11-30b/): gdn fp32 629 us with 32-row items ->
    507 whole head (525 with the prefetch); gdn nvfp4/fp16 2273 -> 2070 with the scratch, nvfp4+sr 1360 -> 1053;
    mamba2 fp32 1039 -> 916, kda fp32 682 -> 512 (whole head; with the prefetch 905 / 562)."""
    BV, BVF, _, nvfp4, maxnreg, _ = launch or launch_config(cache, batch)
    short_dual = not cache.spec.shared and cache.spec.read.name == "nvfp4" and cache.head_v <= 64
    if (cache.device.type == "cuda" and not getattr(cache, "flush_block_v", None)
            and cache.spec.recur.bits_per_element == 16 and (cache.spec.shared or short_dual)):
        BVF = max(BVF, min(32, triton.next_power_of_2(cache.head_v)))
    BVI = getattr(cache, "flush_item_v", None) or max(BVF, triton.next_power_of_2(cache.head_v))
    if not nvfp4 and (BVI % BVF or BVI & (BVI - 1)):
        raise ValueError(f"flush_item_v={BVI} must be a power of two and a multiple of the flush sub-block {BVF}")
    nw = max(4, min(16, BVF * block_k(cache.head_k) // 1024))
    prefetch = bool(getattr(cache, "flush_prefetch", None)) and not nvfp4
    knob = getattr(cache, "flush_scratch", None)
    scratch = (knob is None or bool(knob)) and nvfp4 and BVF < triton.next_power_of_2(cache.head_v)
    programs = int(getattr(cache, "flush_programs", None) or FLUSH_PROGRAMS_PER_SM)
    if programs < 1:
        raise ValueError(f"flush_programs={programs}: at least 1 program per SM")
    stages = flush_stages(cache)
    if stages is None and (not nvfp4 or flush_dot_precision(cache, split=True) == "tf32x3"):
        stages = 1
    return BVI, BVF, nw, maxnreg, prefetch, scratch, programs, stages


NVFP4_PARTS_DEFAULT = 2
NVFP4_PARTS_MAX_PAIRS_PER_SM = 16   # nvfp4_flush_parts: up to this many (row, head) pairs of a step per SM


def nvfp4_flush_parts(cache, scratch: bool, pairs: int | None = None, device=None) -> int:
    """Knob ``flush_nvfp4_items`` of a split step whose nvfp4 flush runs in two passes with the S_L scratch
    (``scratch``, :func:`flush_config`): when few rows flush (the (row, head) pairs would fill at most half of the
    persistent grid, decided on the device), the head's sub-blocks are work items of their own, pass 1 in
    :func:`_nvfp4_part_kernel` (which also lists the flush rows, in place of :func:`_flush_rows_kernel`) and pass 2
    in :func:`_flush_kernel` (2) or in a launch of its own after it (1, :func:`_nvfp4_commit_kernel`), instead of
    whole-head items (0 or False). Bit-identical either way. Default (None) :data:`NVFP4_PARTS_DEFAULT` when the
    step has at most :data:`NVFP4_PARTS_MAX_PAIRS_PER_SM` (row, head) ``pairs`` per SM of ``device``, else 0: with
    more, the
    non-flush launch runs at least as long as a whole-head item on the side stream (gdn nvfp4/fp16 at B = 256: 85
    us non-flush, a whole head's flush ~80 us), and the extra launch only costs (H200, B = 256, per step: gdn
    nvfp4/fp16 160.8 us with whole-head items, 163.3 with (1), 165.8 with (2): pass 2 in :func:`_flush_kernel`
    costs it spills, flush step 1285 -> 1356 us). H200 (``reports/bench/sweeps_2026-12-01d/``), per step, whole-head
    items -> (2): staggered flushes, B = 16, gdn nvfp4/fp16 86.9 -> 31.7 us, nvfp4+sr 46.0 -> 20.6, kda
    nvfp4/fp16 94.3 -> 42.8, mamba2 nvfp4/fp16 32.8 -> 27.5; B = 64 gdn 103.6 -> 66.9, kda 114.5 -> 93.7; aligned
    flushes at B = 16 slower, gdn 17.1 -> 19.1, kda 17.5 -> 19.4."""
    knob = getattr(cache, "flush_nvfp4_items", None)
    if knob is None:
        per_sm = NVFP4_PARTS_MAX_PAIRS_PER_SM * (_num_sms(device) if device is not None else 1)
        knob = NVFP4_PARTS_DEFAULT if pairs is None or pairs <= per_sm else 0
    elif knob is True:
        knob = NVFP4_PARTS_DEFAULT
    knob = _int_knob("flush_nvfp4_items", int(knob), lambda x: x in (0, 1, 2),
                     "0 / false (whole-head items), 1 (pass 2 in a launch of its own), 2 (pass 2 in the flush "
                     "launch), true (2) or none (the default)")
    return knob if scratch else 0


FLUSH_DOT_PRECISIONS = ("ieee", "tf32x3")


def flush_dot_precision(cache, split: bool = False) -> str:
    """Input precision of the replay flush's fp32 ``tl.dot`` products (knob ``flush_dot``): ``"ieee"`` (fp32 FMA
    products and sums) or ``"tf32x3"`` (each fp32 operand split into two TF32 parts, three tensor-core products:
    about fp32 accuracy, not IEEE rounding). An fp32 recurrence checkpoint is always flushed with ``"ieee"``
    (the fp32 path computes in IEEE fp32). Default ``"ieee"``, except on the GPU in the split step's flush
    launch (``split``) of a separate spec with an nvfp4 read copy (its recurrence checkpoint 16- or 8-bit), whose
    three dots per sub-block (Algorithm 3) run as ``"tf32x3"`` there, with no software pipeline (:func:`flush_config`).
    H200, B = 256, per step, IEEE -> 3xTF32 without the pipeline (reports/bench/sweeps_2026-11-30f/
    fl_dot_b256.md): nvfp4/fp16 gdn 229.1 -> 200.9 us, kda 262.2 -> 238.3, mamba2 292.2 -> 282.1; nvfp4/fp8+sr
    gdn 229.4 -> 214.8, kda 265.3 -> 256.4, mamba2 302.9 -> 304.6 (with the pipeline 3xTF32 was slower: gdn
    nvfp4/fp16 244.8). ``"tf32x3"`` is :func:`_dot_tf32x3` for the sub-blocks' two large dots (their key
    operands split once per (row, head); a 16- or 8-bit recurrence tile is TF32-exact and is not split) and
    Triton's built-in ``"tf32x3"`` for the small ones. The default is IEEE off the GPU: the interpreter computes
    each TF32 product in fp32, so the split sums round differently from one fp32 dot."""
    knob = getattr(cache, "flush_dot", None)
    if knob is not None and knob not in FLUSH_DOT_PRECISIONS:
        raise ValueError(f"flush_dot={knob!r}: allowed {', '.join(map(repr, FLUSH_DOT_PRECISIONS))}")
    if cache.spec.recur.name == "fp32":
        return "ieee"
    on_gpu = getattr(getattr(cache, "device", None), "type", None) == "cuda"
    if knob is None and split and on_gpu and not cache.spec.shared and cache.spec.read.name == "nvfp4":
        return "tf32x3"
    return knob or "ieee"


NONFLUSH_DELTA_MAXNREG = 128   # non-flush register cap of the delta-rule families (nonflush_config)
NONFLUSH_STAGES = 3            # software-pipeline stages of the non-flush key-chunk loop (nonflush_config)
NONFLUSH_STAGED_PER_SM = 32    # >= 8-bit read copies: staged from this many non-flush programs per SM


def nonflush_config(cache, batch: int) -> tuple[int, int, bool, int, int | None, int]:
    """The split step's non-flush launch (:func:`_nonflush_kernel`) for ``batch`` rows: ``(BVA, KC, prefetch,
    num_warps, maxnreg, stages)``.

    ``BVA``: all V rows (next power of two); ``KC``: the key-chunk width of the non-flush reductions
    (:func:`.reference.nonflush_kc`, fixed by the reduction order); ``num_warps`` (knob ``nonflush_warps``):
    fp32 read copies ``BVA * KC / 1024`` in 4..16 (<= 32 elements per thread per chunk), 16- and 8-bit read
    copies 2, nvfp4 2 when a chunk has >= 4096 elements (gdn, kda) else as fp32 (H200, B = 256, non-flush us
    per step, 4 -> 2 warps, reports/bench/sweeps_2026-11-30b/nonflush_warps*.md: gdn fp16 140 -> 117, fp8 113 ->
    80, nvfp4 146 -> 136, fp32 172 -> 182; kda fp16 180 -> 158, fp8 167 -> 126, nvfp4 216 -> 160, fp32 233 ->
    208; mamba2 fp16 229 -> 215, fp8 197 -> 177, nvfp4 207 -> 219, fp32 330 -> 326; 8 warps: 1.5-2x slower);
    ``prefetch``: each next read-copy chunk is loaded before the
    current one is reduced (knob ``nonflush_prefetch``). Default: for an fp32 or 8-bit read copy, not for
    16-bit or nvfp4 ones, whose decoded chunks cost more registers. H200, B = 256, non-flush us per step with /
    without (reports/bench/full_39b0202/nonflush_sweep*.md): fp32 gdn 172 / 218, mamba2 330 / 343, kda 231 /
    235; fp8 113 / 120, 197 / 195, 198 / 225; fp16 137 / 140, 254 / 230, 260 / 252; nvfp4/fp16 146 / 146,
    247 / 207, 250 / 245. ``maxnreg`` (knob ``nonflush_maxnreg``; 0 = no cap): :data:`NONFLUSH_DELTA_MAXNREG` for the
    delta rule (gdn, kda) except kda's 2-warp programs unless staged with a compressed read copy, else none.
    H200, B = 256, non-flush step, kda with the cumulative-decay ring, staged, uncapped -> capped (reports/bench/sweeps_2026-11-30e/
    prefix_kda_cfg.md): fp32 173.4 -> 180.1 us, fp16 138.6 -> 115.8, fp8+sr 101.2 -> 91.4, nvfp4/fp16 166.9 ->
    145.2. Earlier (before that ring, uncapped -> capped),
    uncapped -> capped (reports/bench/sweeps_2026-11-30c/nf_cap_gdn.md, kda_cap_b256.md): kda fp32 (4 warps, 3 -> 4
    programs per SM) 228.7 -> 205.0 us; gdn 2-warp programs (6 -> 8 per SM for fp16, 4 -> 8 for nvfp4) fp16 111.9 ->
    106.6, nvfp4/fp16 133.6 -> 127.2, nvfp4+sr 131.2 -> 123.7, fp8+sr unchanged; gdn fp32 needs 128 anyway. Not
    capped then: kda 2-warp programs (fp16 158 -> 231 capped) and mamba2 (fp32 330 -> 378, fp16 215 -> 225;
    sweeps_2026-11-30b/nonflush_warps*.md); caps of 96 / 112 were slower for every fp32 read copy
    (sweeps_2026-11-30c/nf_cap_fp32.md).

    ``stages`` (knob ``nonflush_stages``; 0 = none): the key-chunk loop as a software pipeline of that many stages
    (Triton's ``tl.range(num_stages=...)``: the next chunks' loads are asynchronous copies into shared memory, so
    they are in flight while the current chunk is reduced without holding registers; ``prefetch`` and the
    before-``h`` load of the first chunk then do not apply), with ``BVA * KC / 2048`` warps in 2..16 by default
    (2 for K = 128). Default :data:`NONFLUSH_STAGES` for nvfp4 read copies (kda: on large grids only) and, on
    grids of at least :data:`NONFLUSH_STAGED_PER_SM` programs per SM, fp32 and 16-bit ones and kda's 8-bit ones;
    none for gdn's and mamba2's 8-bit read copies. kda with the cumulative-decay ring, B = 256, unstaged ->
    staged (capped; ``prefix_kda_cfg.md``): fp8+sr 111.2 -> 91.4, nvfp4/fp16 202.6 -> 145.2 (uncapped unstaged: 95.2, 172.7). Before that ring, H200,
    B = 256, non-flush us per step, unstaged -> staged
    (reports/bench/sweeps_2026-11-30d/nf_stages*.md): fp32 gdn 172.8 -> 165.2, kda 203.6 -> 189.6, mamba2 327.5 ->
    314.6; fp16 gdn 108.9 -> 104.4, kda 156.5 -> 156.2, mamba2 214.7 -> 200.2; nvfp4/fp16 gdn 126.6 -> 108.4,
    mamba2 203.8 -> 198.8; not staged: fp8 gdn 77.3 (79.3 staged), kda 127.3 (140.5), mamba2 170.3 (167.2),
    kda nvfp4/fp16 158.1 (168.3); 4 warps or 4 stages were slower everywhere. Smaller grids, step us unstaged /
    staged (``nf_stages_b16.md``, ``_b64.md``): gdn B = 16 (4 programs per SM) fp32 17.7 / 19.0, fp16 14.2 / 14.4,
    nvfp4/fp16 23.9 / 22.9; gdn B = 64 (16 per SM) fp32 56.3 / 57.1, fp16 39.3 / 40.5, nvfp4/fp16 70.6 / 66.1;
    mamba2 B = 64 (62 per SM) fp32 98.1 / 93.8, fp16 67.9 / 65.1."""
    BVA = triton.next_power_of_2(cache.head_v)
    KC = nonflush_kc(block_k(cache.head_k))
    knob = getattr(cache, "nonflush_prefetch", None)
    prefetch = cache.spec.read.bits_per_element in (32, 8) if knob is None else bool(knob)
    bits = cache.spec.read.bits_per_element
    stages = getattr(cache, "nonflush_stages", None)
    if stages is None:
        large = batch * cache.num_heads >= NONFLUSH_STAGED_PER_SM * _num_sms(cache.device)
        if getattr(cache, "per_key", False):
            staged = large
        else:
            staged = bits < 8 or (bits != 8 and large)
        stages = NONFLUSH_STAGES if staged else 0
    _int_knob("nonflush_stages", stages, lambda x: 0 <= x <= 8, "pipeline stages of the key-chunk loop, 0 (none) to 8")
    # compressed read copies and staged loops: 2 warps (a program is bound by its dependent loads and
    # reductions, not by the bytes: fewer, busier threads per program did better; nvfp4 only with 4096-element
    # chunks unless staged)
    if stages:   # <= 64 elements of a chunk per thread
        default = max(2, min(16, BVA * KC // 2048))
    else:
        default = 2 if bits in (16, 8) or (bits < 8 and BVA * KC >= 4096) else max(4, min(16, BVA * KC // 1024))
    warps = getattr(cache, "nonflush_warps", None) or default
    if warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"nonflush_warps={warps}: a power of two from 1 to 32")
    maxnreg = getattr(cache, "nonflush_maxnreg", None)
    if maxnreg is None:
        per_key = getattr(cache, "per_key", False)
        capped = getattr(cache, "delta", False) and (not per_key or warps >= 4 or (stages > 0 and bits != 32))
        maxnreg = NONFLUSH_DELTA_MAXNREG if capped else 0
    _int_knob("nonflush_maxnreg", maxnreg, lambda x: x == 0 or 24 <= x <= 255,
              "registers per thread, 24 to 255, or 0 for no cap")
    return BVA, KC, prefetch and not stages, warps, (maxnreg or None), stages


def nonflush_input_scratch(cache) -> bool:
    """Knob ``nonflush_xscratch`` of the split non-flush launch (:func:`_nonflush_kernel`, ``XSCR``): compute the
    key row's ``gamma q``, ``gamma k`` once per program and park them in a global scratch row (``[B, HV, 2, BK]``
    fp32, L1 / L2 resident) that the key chunks read, instead of every thread recomputing its chunk columns in
    every chunk. Default: for nvfp4 read copies (their loop is bound by instruction issue)."""
    knob = getattr(cache, "nonflush_xscratch", None)
    return cache.spec.read.name == "nvfp4" if knob is None else bool(knob)


FLUSH_STREAM_MODES = (0, 1, 2)


def flush_stream_mode(cache) -> int:
    """Knob ``flush_stream`` of a split step (:func:`flush_side_stream`): 0 the flush launches on the caller's
    stream after the non-flush launch, 1 (default) on a side stream, 2 on a high-priority side stream."""
    mode = getattr(cache, "flush_stream", None)
    mode = 1 if mode is None else mode
    if isinstance(mode, bool) or mode not in FLUSH_STREAM_MODES:
        raise ValueError(f"flush_stream={mode!r}: allowed 0 (off), 1 (side stream), 2 (high-priority side stream)")
    return int(mode)


def flush_side_stream(cache, device):
    """The side stream of a split step's flush launches, created once per cache and device (None: knob
    ``flush_stream`` 0, or not a CUDA device). The flush rows and the non-flush rows touch disjoint slots, so
    the flush launches (listing the flush rows, then flushing them) run concurrently with the non-flush launch,
    which stays on the caller's stream; the caller's stream waits for the side stream at the end of the step
    (CUDA graphs capture the fork and the join). H200, batch 256, per step (reports/bench/sweeps_2026-11-30c):
    gdn fp32 191.9 -> 189.9 us, fp16 139.2 -> 135.7, nvfp4/fp16 255.0 -> 252.4; mamba2 fp32 365.3 -> 362.6;
    kda fp32 249.2 -> 245.8 (mostly the flush-row listing and the launch tails overlapping; the flush grid
    fills the SMs, so the two kernels barely run side by side; a high-priority stream (2) gained nothing)."""
    mode = flush_stream_mode(cache)
    if not mode or device.type != "cuda":
        return None
    streams = cache.__dict__.setdefault("_flush_streams", {})
    key = (mode, device.index)
    if key not in streams:   # (a lower number is a higher priority; out-of-range values map to the highest)
        streams[key] = torch.cuda.Stream(device, priority=-8 if mode == 2 else 0)
    return streams[key]


def flush_stages(cache) -> int | None:
    """The ``flush_stages`` knob, validated: software-pipeline stages of the flush's sub-block loops (the
    ``num_stages`` launch option of the fused / conventional and the flush launches). None (not set): Triton's
    default (the next sub-block's recurrence tile and ring rows are copied ahead into shared memory) except in the
    split step's flush launch (:func:`flush_config`); 1: no pipeline (loads straight into registers)."""
    stages = getattr(cache, "flush_stages", None)
    if stages is not None:
        _int_knob("flush_stages", stages, lambda x: 1 <= x <= 8,
                  "pipeline stages of the flush sub-block loops, 1 (none) to 8")
    return stages


def _stages_kwargs(stages) -> dict:
    """Launch keyword for the software-pipeline stages of a kernel's loops (None: Triton's default)."""
    return {} if stages is None else dict(num_stages=stages)


def _maxnreg_kwargs(maxnreg, device) -> dict:
    """Launch keyword for a register cap (None / 0: no cap); CUDA only (the interpreter takes no ``maxnreg``)."""
    return dict(maxnreg=maxnreg) if maxnreg and device.type == "cuda" else {}


def triton_step(cache, slot_idx, q, k, v, g, beta, out=None):
    """Launch one decode step on the cache's tensors (inputs already validated).

    Args:
        slot_idx: int32/int64 ``[B]``; q, k: ``[B, HV, K]``; v: ``[B, HV, V]`` (fp32/bf16/fp16, contiguous);
        g: log decays ``[B, HV]`` (kda ``[B, HV, K]``); beta: ``[B, HV]`` (any float; unused for mamba2);
        out: optional float32 ``[B, HV, V]`` to write into.

    Returns:
        float32 ``[B, HV, V]``.
    """
    B, HV, V = v.shape
    K = cache.head_k
    if out is None:
        out = torch.empty(B, HV, V, dtype=torch.float32, device=v.device)
    if B == 0:
        return out
    BK = block_k(K)
    launch = launch_config(cache, B)
    BV, BVF, num_warps, nvfp4, maxnreg, split = launch
    extra = _maxnreg_kwargs(maxnreg, v.device)
    hp0, hp1, hp2 = cache.hp.tensors()
    lp0, lp1, lp2 = cache.lp.tensors()
    grid = (triton.cdiv(V, BV), HV, B)
    cached = cached_corrections(cache)
    # a cached-corrections ring (shared delta-rule spec) keeps no raw v/beta (empty tensors): the kernel never
    # touches those pointers then; pass the u ring in their place (no null/empty pointer arguments)
    rv = cache.ring_u if cached else cache.ring_v
    rb = cache.ring_u if cached else cache.ring_beta
    args = (q, k, v, g, beta, slot_idx, out,
            hp0, hp1, hp2, lp0, lp1, lp2,
            cache.ring_g, cache.ring_k, rv, rb, cache.ring_u,
            cache.ring_count, cache.flush_count,
            cache.seed, HV)
    consts = dict(K=K, V=V, L=cache.window, L1=cache.ring_k.shape[2],
                  L1P=max(2, triton.next_power_of_2(cache.ring_k.shape[2])),
                  LP=flush_entries(cache.window), LPLOG=flush_entries(cache.window).bit_length() - 1, BK=BK, BV=BV,
                  BVF=BVF, NVF=triton.cdiv(V, BVF), NV4=nvfp4, GK=K if cache.per_key else 1, DELTA=cache.delta,
                  FMT_HP=FORMAT_CODE[cache.spec.recur.name], FMT_LP=FORMAT_CODE[cache.spec.read.name],
                  SHARED=cache.spec.shared, SR=cache.spec.sr, TAG=cache.tag, CACHED=cached,
                  DOTP=flush_dot_precision(cache))
    if split:
        # all launches before the counter advance (same ring counts h); the non-flush and the flush launches touch
        # disjoint slots because the rows of one step have distinct slots (see the kernels), so the flush launches
        # may run on a side stream, concurrently with the non-flush launch (flush_side_stream).
        side = flush_side_stream(cache, v.device)
        if side is not None:
            main = torch.cuda.current_stream(v.device)
            side.wait_stream(main)
        # every scratch of the step is allocated before the first launch and kept until the join (a block freed
        # on the caller's stream between the launches could otherwise be handed to another tensor while a
        # side-stream kernel still uses it)
        BVA, KC, prefetch, nw, nf_maxnreg, stages = nonflush_config(cache, B)
        BVI, BVF, nwf, _, fpre, scratch, per_sm, fstages = flush_config(cache, B, launch)   # (maxnreg: ``extra``)
        NVB = 1 if nvfp4 else triton.cdiv(V, BVI)
        nprog = min(B * HV * NVB, per_sm * _num_sms(v.device))
        rows = torch.empty(B, dtype=torch.int32, device=v.device)
        nrows = torch.empty(1, dtype=torch.int32, device=v.device)
        fconsts = dict(consts, BV=BVI, BVF=BVF, NVF=triton.cdiv(V, BVF),
                       DOTP=flush_dot_precision(cache, split=True))
        scr = torch.empty(nprog * fconsts["NVF"] * BVF * BK if scratch else 1, dtype=torch.float32, device=v.device)
        parts = nvfp4_flush_parts(cache, scratch, B * HV, v.device)
        amx = torch.empty(nprog * fconsts["NVF"] if parts else 1, dtype=torch.float32, device=v.device)
        # 1) the non-flush rows + the padded rows' zero output (one program per (row, head): ring read once,
        # h-masked; no flush code; its own warps and register cap)
        nf_extra = _maxnreg_kwargs(nf_maxnreg, v.device)
        xscr = nonflush_input_scratch(cache)
        xs = torch.empty(B * HV * 2 * BK if xscr else 1, dtype=torch.float32, device=v.device)
        _nonflush_kernel[(1, HV, B)](
            q, k, v, g, beta, slot_idx, out, lp0, lp1, lp2,
            cache.ring_g, cache.ring_k, rv, rb, cache.ring_u, cache.ring_count, xs, HV,
            K=K, V=V, L=cache.window, L1=consts["L1"], L1P=consts["L1P"], BK=BK, BVA=BVA, KC=KC,
            GK=consts["GK"], DELTA=cache.delta, FMT_LP=consts["FMT_LP"], CACHED=cached,
            PREFETCH=prefetch, STAGES=stages, XSCR=xscr, num_warps=nw, **nf_extra)
        # 2) the flush rows, listed on the device, then a persistent grid over their (row, head, V-block) work
        # items (nvfp4: (row, head), the whole head per item; with few flush rows (row, head, sub-block) items in
        # two passes, nvfp4_flush_parts); the fused kernel's flush config
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            if parts:   # lists the flush rows; few of them: pass 1 of their nvfp4 heads in sub-block items
                _nvfp4_part_kernel[(nprog,)](rows, nrows, B, *args, **fconsts, scr_ptr=scr, amx_ptr=amx,
                                             BLOCK=min(1024, triton.next_power_of_2(B)), num_warps=nwf, **extra,
                                             **_stages_kwargs(fstages))
            else:
                _flush_rows_kernel[(1,)](slot_idx, cache.ring_count, rows, nrows, B, L=cache.window,
                                         BLOCK=min(1024, triton.next_power_of_2(B)))
            _flush_kernel[(nprog,)](rows, nrows, *args, **fconsts, NVB=NVB, scr_ptr=scr, FPRE=fpre, SCRATCH=scratch,
                                    NV4PARTS=parts, amx_ptr=amx, num_warps=nwf, **extra,
                                    **_stages_kwargs(fstages))
            if parts == 1:
                _nvfp4_commit_kernel[(nprog,)](rows, nrows, q, slot_idx, out, hp0, hp1, hp2, lp0, lp1, lp2,
                                               cache.flush_count, scr, amx, cache.seed, HV, K=K, V=V, BK=BK, BVF=BVF,
                                               NVF=fconsts["NVF"], FMT_HP=consts["FMT_HP"], FMT_LP=consts["FMT_LP"],
                                               SHARED=consts["SHARED"], SR=consts["SR"], TAG=consts["TAG"],
                                               num_warps=nwf, **extra)
        if side is not None:
            for t in (rows, nrows, scr, amx):   # allocated on the caller's stream, used on the side stream
                t.record_stream(side)
            main.wait_stream(side)
    else:
        _decode_step_kernel[grid](*args, **consts, num_warps=num_warps, **extra,
                                  **_stages_kwargs(flush_stages(cache)))
    return out


@triton.jit
def _advance_kernel(idx_ptr, cnt_ptr, fcnt_ptr, B, L: tl.constexpr, BLOCK: tl.constexpr):
    """Per row with slot >= 0: ring count h -> h + 1, or 0 and flush count + 1 when h + 1 == L."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < B
    slot = tl.load(idx_ptr + offs, mask=m, other=-1).to(tl.int64)
    ok = m & (slot >= 0)
    h = tl.load(cnt_ptr + slot, mask=ok, other=0)
    flush = (h + 1) >= L
    tl.store(cnt_ptr + slot, tl.where(flush, 0, h + 1), mask=ok)
    fc = tl.load(fcnt_ptr + slot, mask=ok, other=0)
    tl.store(fcnt_ptr + slot, fc + flush.to(tl.int32), mask=ok)


def triton_advance(cache, slot_idx) -> None:
    """Advance the ring and flush counters of the rows' slots (one launch, no host sync)."""
    B = slot_idx.numel()
    if B == 0:
        return
    BLOCK = min(1024, triton.next_power_of_2(B))
    _advance_kernel[(triton.cdiv(B, BLOCK),)](slot_idx, cache.ring_count, cache.flush_count, B,
                                              L=cache.window, BLOCK=BLOCK)
