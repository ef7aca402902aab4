"""The flush's arithmetic (Triton device functions): S_L from the recurrence checkpoint and the ring, and its commit.

A flush (every L-th step of a slot; conventional decoding: every step, L = 1) rebuilds the fp32 state
``S_L = S_hp d_{1:L} + U Kd2`` in the chunked form (:func:`_flush_prep` once per (row, head), :func:`_flush_chunk`
per sub-block of rows), writes the output ``S_L q`` and casts ``S_L`` into the recurrence checkpoint and, for a
separate spec, the read copy (:func:`_commit_flush_rows`). The corrections ``U``: cached in the ring for a shared
delta-rule spec (Algorithm 1), recomputed from ``S_hp`` for a separate one (Algorithm 3). The torch mirror with the
same operation order is :func:`.reference.chunked_flush_state`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode

from .tiles import _load_tile, _store_tile

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
def _nilpotent_inverse(N, P: tl.constexpr, PLOG: tl.constexpr, DOTP: tl.constexpr = "ieee"):
    """``(I + N)^{-1}`` of a strictly triangular ``N [P, P]`` (``P = 2^PLOG``, so ``N^P = 0``) as
    ``(I - N)(I + N^2)(I + N^4)...(I + N^(P/2))``: PLOG - 1 squarings and as many products (P = 16: six fp32 dots,
    no serial column loop); the torch mirror is :func:`.reference.nilpotent_inverse`."""
    offs = tl.arange(0, P)
    eye = tl.where(offs[:, None] == offs[None, :], 1.0, 0.0)
    T = eye - N
    Np = N
    for s in tl.static_range(1, PLOG):            # Np = N^(2^s); T <- T (I + Np)
        Np = tl.dot(Np, Np, input_precision=DOTP)
        T = tl.dot(T, eye + Np, input_precision=DOTP)
    return T


@triton.jit
def _flush_prep(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, offs_k, mk,
                K: tl.constexpr, L: tl.constexpr, LP: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
                BK: tl.constexpr, LPLOG: tl.constexpr, CACHED: tl.constexpr, DOTP: tl.constexpr = "ieee",
                ring0k=None):
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
    of the fp32 dots (:func:`.launch.flush_dot_precision`). ``ring0k``: the pair's first entry in the key heads'
    ring (None: ``ring0``; :func:`.ring._load_ring_keys`).
    """
    if ring0k is None:
        ring0k = ring0
    offs_j = tl.arange(0, LP)
    mring = offs_j < L - 1
    cur = offs_j == L - 1
    ej = ring0 + offs_j
    Kr = tl.load(rk_ptr + (ring0k + offs_j)[:, None] * K + offs_k[None, :], mask=mring[:, None] & mk[None, :],
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
                ki = tl.load(rk_ptr + (ring0k + i) * K + offs_k, mask=mk & inring, other=0.0).to(tl.float32)
                ki = tl.where(inring, ki, kt)                                    # k_i [BK]
                gci = tl.load(rg_ptr + (ring0 + i) * GK + offs_k, mask=mk & inring, other=0.0)
                gci = tl.where(inring, gci, gtot)                                # Gc_i [BK]
                row = tl.sum(Kr * tl.exp(tl.minimum(Gc - gci[None, :], 0.0)) * ki[None, :], 1)
                MT = tl.where((offs_j > i)[:, None] & (offs_j == i)[None, :], row[:, None], MT)
            M = tl.trans(MT)
        # T = (I + N)^{-1}, N = M diag(beta) strictly upper triangular [LP, LP] (LP = 2^LPLOG), so N^LP = 0 and
        # T = sum_k (-N)^k = (I - N)(I + N^2)(I + N^4)...(I + N^(LP/2)): LP = 16: six 16x16 fp32 dots
        # (no serial column loop)
        T = _nilpotent_inverse(M * br[None, :], LP, LPLOG, DOTP)
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
                 CACHED: tl.constexpr, DOTP: tl.constexpr):
    """fp32 S_L of rows ``offs_f`` ([BVF, BK]) from the recurrence checkpoint, chunked form, one pass over
    the tile, S_L = S_hp * d_{1:L} + U Kd2 with the corrections U [BVF, LP]:

    * ``CACHED`` (delta rule, shared spec, Algorithm 1): u_0..u_{L-2} are the ring's cached corrections (computed
      on the non-flush steps from this same checkpoint), u_{L-1} = beta (v - S_hp kdl - U cl) (one row
      reduction over the tile): one fp32 IEEE dot;
    * separate spec (Algorithm 3): recomputed from S_hp, P = S_hp Kd^T, U = ((V - P) * beta) T, i.e.
      u_j = beta_j (v_j - P_j - sum_{i<j} M_ij u_i) = beta_j (v_j - a_j S_{j-1} k_j): three fp32 IEEE dots;
    * mamba2: U = V.

    ``UMODE`` (separate delta-rule spec, nvfp4 two-pass flush): 2 reloads the U that
    :func:`_head_corrections_first` saved (entries 0..L-2 in the ring's u slots, dead after a flush; entry L-1 in the
    output row, overwritten later) instead of computing it (bit-identical values); 0 computes it.
    ``DOTP``: the input precision of the fp32 dots (:func:`.launch.flush_dot_precision`)."""
    offs_j = tl.arange(0, LP)
    mring = offs_j < L - 1
    last = (offs_j == L - 1)[None, :]
    uptr = ru_ptr + (ring0 + offs_j)[None, :] * V + offs_f[:, None]
    if UMODE == 2:
        S0 = _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
        U = tl.load(uptr, mask=mf[:, None] & mring[None, :], other=0.0)
        ul = tl.load(out_ptr + bh * V + offs_f, mask=mf, other=0.0)
        U = tl.where(last, ul[:, None], U)
    elif CACHED:
        S0 = _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
        U = tl.load(uptr, mask=mf[:, None] & mring[None, :], other=0.0)         # cached u_0..u_{L-2}
        vf = tl.load(v_ptr + bh * V + offs_f, mask=mf, other=0.0).to(tl.float32)
        ul = beta * (vf - (tl.sum(S0 * kdl[None, :], 1) + tl.sum(U * cl[None, :], 1)))   # u_{L-1}
        U = tl.where(last, ul[:, None], U)
    else:
        S0, U = _uncached_corrections(hp0, hp1, hp2, v_ptr, rv_ptr, sh, bh, ring0, Kd, Kdl, T, br, offs_f, mf, offs_k,
                                      mk, K, V, L, LP, DELTA, FMT_HP, BK, DOTP)
    if DOTP == "tf32x3":
        S = S0 * dL[None, :] + _dot_tf32x3(U, Kd2, Kd2l, False)
    else:
        S = S0 * dL[None, :] + tl.dot(U, Kd2, input_precision=DOTP)
    return S


@triton.jit
def _uncached_corrections(hp0, hp1, hp2, v_ptr, rv_ptr, sh, bh, ring0, Kd, Kdl, T, br, offs_f, mf, offs_k, mk,
                          K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, LP: tl.constexpr, DELTA: tl.constexpr,
                          FMT_HP: tl.constexpr, BK: tl.constexpr, DOTP: tl.constexpr):
    """The checkpoint rows ``offs_f`` (``S0`` fp32 ``[R, BK]``) and their corrections ``U`` ``[R, LP]`` where the
    ring does not cache them: recomputed for a separate delta-rule spec (Algorithm 3), ``U = ((V - S0 Kd^T) * beta)
    T``; mamba2: the raw inputs, ``U = V`` (entries 0..L-2 from the ring, L-1 the current v)."""
    offs_j = tl.arange(0, LP)
    mring = offs_j < L - 1
    last = (offs_j == L - 1)[None, :]
    vf = tl.load(v_ptr + bh * V + offs_f, mask=mf, other=0.0).to(tl.float32)
    Vr = tl.load(rv_ptr + (ring0 + offs_j)[None, :] * V + offs_f[:, None], mask=mf[:, None] & mring[None, :],
                 other=0.0).to(tl.float32)
    Vr = tl.where(last, vf[:, None], Vr)                                         # [R, LP]
    S0 = _load_tile(hp0, hp1, hp2, sh, offs_f, offs_k, mf, mk, K, V, FMT_HP, BK)
    if DELTA:
        if DOTP == "tf32x3":
            # bf16, fp16, fp8, e5m2 (codes BF16..E5M2): the decoded tile holds TF32 values
            P = _dot_tf32x3(S0, tl.trans(Kd), tl.trans(Kdl), FMT_HP >= fcode.BF16 and FMT_HP <= fcode.E5M2)   # [R, LP]
        else:
            P = tl.dot(S0, tl.trans(Kd), input_precision=DOTP)                   # [R, LP]
        U = tl.dot((Vr - P) * br[None, :], T, input_precision=DOTP)            # [R, LP]
    else:
        U = Vr
    return S0, U


@triton.jit
def _save_corrections(U, ru_ptr, out_ptr, bh, ring0, offs_f, mf, V: tl.constexpr, L: tl.constexpr,
                      LP: tl.constexpr):
    """Save the recomputed corrections ``U`` ``[R, LP]`` of rows ``offs_f`` for a later reload (``UMODE`` 2 of
    :func:`_flush_chunk`): entries 0..L-2 into the ring's u slots (dead after a flush), entry L-1 into the output
    row (overwritten later)."""
    offs_j = tl.arange(0, LP)
    tl.store(ru_ptr + (ring0 + offs_j)[None, :] * V + offs_f[:, None], U,
             mask=mf[:, None] & (offs_j < L - 1)[None, :])
    tl.store(out_ptr + bh * V + offs_f[:, None] + offs_j[None, :] * 0, U,
             mask=mf[:, None] & (offs_j == L - 1)[None, :])


@triton.jit
def _head_corrections_first(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, Kd, Kdl, T, br, offs_k, mk,
                            K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, LP: tl.constexpr,
                            FMT_HP: tl.constexpr, BK: tl.constexpr, DOTP: tl.constexpr, UROWS: tl.constexpr):
    """A separate delta-rule spec's recomputed corrections of the whole head, ``UROWS`` rows at a time (the rows past
    V masked), saved for the sub-blocks to reload (:func:`_save_corrections`; the caller puts a barrier before the
    reloads). A group of UROWS >= 64 rows makes the 16-column dots' M dimension a warpgroup's: the warps split the
    rows, where a 16-row sub-block at 4 warps computes each 16 x 16 product twice (reports/bench/speed/sass/)."""
    for r in tl.range(0, (V + UROWS - 1) // UROWS, loop_unroll_factor=1):
        offs_u = r * UROWS + tl.arange(0, UROWS)
        mu = offs_u < V
        S0, U = _uncached_corrections(hp0, hp1, hp2, v_ptr, rv_ptr, sh, bh, ring0, Kd, Kdl, T, br, offs_u, mu, offs_k,
                                      mk, K, V, L, LP, True, FMT_HP, BK, DOTP)
        _save_corrections(U, ru_ptr, out_ptr, bh, ring0, offs_u, mu, V, L, LP)


@triton.jit
def _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta,
             Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K: tl.constexpr, V: tl.constexpr,
             L: tl.constexpr, LP: tl.constexpr, DELTA: tl.constexpr,
             FMT_HP: tl.constexpr, BK: tl.constexpr, CACHED: tl.constexpr, UMODE: tl.constexpr = 0,
             DOTP: tl.constexpr = "ieee"):
    """S_L of rows ``offs_f``: conventional (L = 1) one sequential step, replay the chunked form."""
    if L == 1:
        S = _conventional_rows(hp0, hp1, hp2, v_ptr, sh, bh, at, kt, beta, offs_f, mf, offs_k, mk, K, V, DELTA,
                               FMT_HP, BK)
    else:
        S = _flush_chunk(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, Kd, Kdl, Kd2, Kd2l, dL, T, br,
                         kdl, cl, beta, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK,
                         UMODE if DELTA and L > 1 else 0, CACHED, DOTP)
    return S


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
def _flush_row_flags(idx_ptr, cnt_ptr, start, B, L: tl.constexpr, BLOCK: tl.constexpr):
    """Rows ``start + arange(BLOCK)`` of a split step: (offsets, 1 where the row flushes this step (slot >= 0,
    h + 1 >= L), else 0)."""
    offs = start + tl.arange(0, BLOCK)
    m = offs < B
    slot = tl.load(idx_ptr + offs, mask=m, other=-1).to(tl.int64)
    h = tl.load(cnt_ptr + tl.maximum(slot, 0), mask=m, other=0)
    return offs, (m & (slot >= 0) & (h + 1 >= L)).to(tl.int32)
