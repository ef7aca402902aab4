"""The ring terms of a non-flush step (Triton device functions shared by the fused and the non-flush kernels).

A non-flush step's output is ``o = S_lp (gamma q) + sum_j u_j cq_j + u_t (k_t . q_t)`` over the ``h`` ring entries
(decays ``exp(G_t - G_j)`` from the cumulative log decays the ring keeps), with the current correction
``u_t = beta (v_t - S_lp (gamma k) - sum_j u_j ck_j)`` (delta rule) or ``v_t`` (mamba2); the step then appends its
input to the ring. *The reduction order is part of the definition*: the read-copy products are summed per key chunk
and the chunk sums added in chunk order (:func:`_chunks_in_order`), as the torch reference does.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .rounding import pow2_f32
from .tiles import _nvfp4_chunk_sums, _read_scales, _read_unscale, _vec4

@triton.jit
def _load_ring_keys(rk_ptr, rg_ptr, ej, mrow, offs_k, mk, K: tl.constexpr, GK: tl.constexpr, ejk=None):
    """Ring entries ``ej`` [L1P] (rows where ``mrow`` is false read as 0): keys [L1P, BK] and log decays
    ([L1P], or [L1P, BK] when GK = K). ``ejk``: the keys' entries in the key heads' ring (None: ``ej``; value
    heads that share a key share its ring rows, ``SSMStateCache.key_group``)."""
    if ejk is None:
        ejk = ej
    Kr = tl.load(rk_ptr + ejk[:, None] * K + _vec4(offs_k)[None, :], mask=mrow[:, None] & mk[None, :],
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
    the ring tiles live across the chunk loop) but loads kda's row h - 1 directly (the cross-warp pick over
    ``[L1P, BK]`` was slower there; docs/TUNING.md)."""
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
def _read_rowdot(S, SB, inv, gam, s, v, NV4R: tl.constexpr, RSR: tl.constexpr):
    """``sum_k S[r, k] gam[k] v[k]`` of a read-copy tile ``[R, BK]`` (:func:`.tiles._load_read`; ``gam``, ``v`` ``[BK]``;
    ``s`` the scaled read's exponent, :func:`.tiles._read_scales`, unused otherwise) in
    the non-flush order: the sums of the ``BK // KC`` (<= 4) K chunks of ``KC = max(16, BK // 4)``
    (:func:`.reference.nonflush_kc`), added in chunk order (:func:`_chunks_in_order`). A scaled read sums the
    products of the stored values before their scales, with the input scaled by a power of two,
    ``x' = (gam 2**s) v`` (:func:`.tiles._read_scale`), and unscales the total (:func:`.tiles._read_unscale`):
    ``NV4R`` (an nvfp4 read copy): ``S`` holds the E2M1 values times 2**-6 and ``SB`` the block scales; each chunk
    sums its blocks' ``s_b sum raw x'``, and the total is divided by ``s_enc`` (``inv = 1 / s_enc``): two
    multiplies per element fewer than decoding the values first, and the exact values q s_b / s_enc enter the
    products. ``RSR`` (a row-scaled fp8 / int8 read copy): ``S`` holds the codes' values q and ``SB`` the rows'
    decode scales d (``[R]``); each chunk sums ``q x'``, and the total is multiplied by d: one multiply per element
    fewer, and the exact values q d enter the products."""
    R: tl.constexpr = S.shape[0]
    BK: tl.constexpr = S.shape[1]
    KC: tl.constexpr = BK // 4 if BK >= 64 else 16
    NKC: tl.constexpr = BK // KC
    if NV4R or RSR:
        x = (gam * pow2_f32(s)) * v
    else:
        x = gam * v
    if NV4R:
        return _read_unscale(_chunks_in_order(_nvfp4_chunk_sums(S, SB, x, NKC)), inv, s, 6)
    acc = _chunks_in_order(tl.sum(tl.reshape(S * x[None, :], (R, NKC, KC)), 2))
    if RSR:
        acc = _read_unscale(acc, SB, s, 0)
    return acc


@triton.jit
def _nonflush_rows(S, SB, inv, Ur, cq, ck, gam, gmax, q, kt, vt, beta, DELTA: tl.constexpr, NV4R: tl.constexpr,
                   RSR: tl.constexpr):
    """Output rows of a non-flush step from the read-copy tile ``S``, ``SB`` [BV, BK] (:func:`.tiles._load_read`;
    ``inv = 1 / s_enc`` for an nvfp4 one, ``NV4R``; ``RSR`` a row-scaled one) and the ring's corrections
    (mamba2: raw inputs) ``Ur`` [L1P, BV] (zero at j >= h); ``gam`` [BK] the checkpoint's decay and ``gmax`` its
    max (:func:`_read_rowdot`): o = S (gam q) + sum_j u_j cq_j + u_t (k_t . q_t)
    with u_t = beta (v_t - S (gam k_t) - sum_j u_j ck_j) (delta rule) or v_t. Returns (o, u_t), [BV] each."""
    if NV4R or RSR:
        sq, sk = _read_scales(gam * q, gam * kt, gmax, DELTA)
    else:
        sq = 0
        sk = 0
    acc_q = tl.sum(Ur * cq[:, None], 0)                                       # [BV]
    acc_q = acc_q + _read_rowdot(S, SB, inv, gam, sq, q, NV4R, RSR)
    if DELTA:
        acc_k = tl.sum(Ur * ck[:, None], 0) + _read_rowdot(S, SB, inv, gam, sk, kt, NV4R, RSR)
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
                 GK: tl.constexpr, DELTA: tl.constexpr, CACHED: tl.constexpr, ehk=None, klead=True):
    """Append k_t, the cumulative log decay G_t ([BK]; GK = 1: its element 0) and (where the flush recomputes
    the corrections) beta_t as ring entry ``eh``; only the ``lead`` program of a (row, head) writes them. k_t goes
    in the ring's input dtype (``SSMStateCache.ring_dtype``: the caller's activations, held exactly), at entry
    ``ehk`` of the key heads' ring (None: ``eh``), written only where ``klead`` (the first value head of a key
    group: the group's heads hold the same key)."""
    if ehk is None:
        ehk = eh
    tl.store(rk_ptr + ehk * K + offs_k, kt.to(rk_ptr.dtype.element_ty), mask=mk & lead & klead)   # (exact: an input)
    if GK == 1:
        tl.store(rg_ptr + eh + offs_k, Gt, mask=(offs_k == 0) & lead)
    else:
        tl.store(rg_ptr + eh * GK + offs_k, Gt, mask=mk & lead)
    if DELTA and not CACHED:
        tl.store(rb_ptr + eh + offs_k, beta + tl.zeros(offs_k.shape, dtype=tl.float32), mask=(offs_k == 0) & lead)


@triton.jit
def _next_counts(h, fc, L: tl.constexpr):
    """The counters after a step: ring count ``h`` -> h + 1, or 0 and flush count ``fc`` + 1 when h + 1 == L
    (the reference's ``SSMStateCache._advance``)."""
    flush = (h + 1) >= L
    return tl.where(flush, 0, h + 1), fc + flush.to(tl.int32)
