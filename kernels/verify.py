"""Speculative verification kernels (DESIGN.md sec. 3, Algorithm 2): replay verify, conventional snapshots, restore.

* :func:`_verify_kernel`, grid ``(split, HV, B)``: ``T`` tokens of one (row, head), output-only from the read copy
  and the ring (:mod:`.spec_reference` gives the arithmetic and is its torch mirror, bit for bit under the
  interpreter). The delta rule's tiles stack each token's query and key rows, so each fp32 ``tl.dot``
  (``input_precision`` the ``verify_dot`` knob) serves both; the key side (ring and window key products, the
  window's nilpotent triangular solve, :func:`.flush_math._nilpotent_inverse`) is computed once per program, then
  one pass over the read copy's value rows in blocks of ``BV`` serves all T tokens; no state is materialised. The
  T inputs are written to the ring past the committed entries and to the draft buffers.
* :func:`_conventional_verify_kernel` (the snapshot baseline): one read of the checkpoint, then per token a
  conventional step (:func:`.flush_math._seq_step`), its output, and a rounded snapshot write (re-read, L1/L2, to
  continue from the rounded state).
* :func:`_restore_kernel`: the conventional commit, snapshot ``accepted - 1`` copied into the checkpoint.

Launched by :mod:`.spec_decode` (no host synchronisation).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode
from replayssm_quant.quant.format_codes import FORMAT_CODE

from .flush_math import _nilpotent_inverse, _seq_step
from .launch import launch_options
from .reference import block_k, cached_corrections
from .rounding import nvfp4_amax, nvfp4_encode_scale
from .spec_reference import value_rows, verify_ring_entries, verify_rows_layout
from .tiles import _load_step_inputs, _load_tile, _store_tile, key_row


@triton.jit
def _verify_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, ntok_ptr, out_ptr, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, dg_ptr, dv_ptr, db_ptr, dcnt_ptr,
    HV, T: tl.constexpr, TH: tl.constexpr, TR: tl.constexpr, TRLOG: tl.constexpr, K: tl.constexpr,
    V: tl.constexpr, C: tl.constexpr, RP: tl.constexpr, TM: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    NVB: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr, FMT_LP: tl.constexpr, CACHED: tl.constexpr,
    ZERO_H: tl.constexpr, DOTP: tl.constexpr, HG: tl.constexpr,
):
    """Verify ``ntok[b] <= T`` tokens (inputs ``[B, T, HV, .]``; ``ntok_ptr`` None: T) of row b, head, value rows
    ``pv * NVB * BV ..`` in ``NVB`` blocks of ``BV``: outputs ``out [B, T, HV, V]``, ring entries ``h .. h + ntok - 1``
    (``h`` = the slot's committed count, or 0 with ``ZERO_H``: the committed tail after a flush; ring capacity
    ``C``), with ``dg_ptr`` (else None) the draft buffers ``[S, HV, TM, .]`` and the slot's pending count
    ``dcnt[slot] = T``. Tiles of ``TR`` stacked rows (:func:`.spec_reference.verify_rows_layout`: with the delta
    rule token t's query in row t and its key in row ``TH + t``); the key side (ring and window products, the
    solve's matrix) once per program, the value side per block. Padded rows (slot < 0): zero outputs. ``DOTP``:
    input precision of every ``tl.dot`` (``"ieee"`` or ``"tf32x3"``). ``HG``: value heads per key head
    (``SSMStateCache.key_group``): k ``[B, T, HV // HG, K]`` and the ring's keys per key head
    (:func:`.tiles.key_row`), written by the group's first head."""
    DRAFT: tl.constexpr = dg_ptr is not None
    pv = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    offs_r = tl.arange(0, TR)
    if DELTA:
        isk = offs_r >= TH
    else:
        isk = offs_r < 0
    tok = tl.where(isk, offs_r - TH, offs_r)                                # the row's token
    if DELTA:
        colr = isk                                                          # rows holding a window entry
    else:
        colr = offs_r >= 0
    rows = (b.to(tl.int64) * T + tok) * HV + head                           # the rows' input rows [TR]
    krows = key_row(b.to(tl.int64) * T + tok, head, HV, HG)                 # their key rows (k [B, T, HK, K])
    slot = tl.load(idx_ptr + b).to(tl.int64)
    if ntok_ptr is None:
        nt = T
    else:
        nt = tl.load(ntok_ptr + b)
    if DRAFT:
        tl.store(dcnt_ptr + slot, T, mask=(slot >= 0) & (pv == 0) & (head == 0))
    mq = (~isk) & (tok < T)                                                 # the output rows
    if slot < 0:
        for vb in range(NVB):
            offs_v = (pv * NVB + vb) * BV + tl.arange(0, BV)
            tl.store(out_ptr + rows[:, None] * V + offs_v[None, :], tl.zeros([TR, BV], dtype=tl.float32),
                     mask=mq[:, None] & (offs_v < V)[None, :])
    elif nt > 0:
        sh = slot * HV + head
        ring0 = sh * C
        ring0k = key_row(slot, head, HV, HG) * C                            # the ring's keys: per key head
        if ZERO_H:
            h = 0
        else:
            h = tl.load(cnt_ptr + slot)
        mt = tok < nt
        mtk = mt[:, None] & mk[None, :]
        X = tl.load(q_ptr + rows[:, None] * K + offs_k[None, :], mask=mtk & (~isk)[:, None], other=0.0).to(tl.float32)
        if DELTA:
            Xk = tl.load(k_ptr + krows[:, None] * K + offs_k[None, :], mask=mtk & isk[:, None], other=0.0)
            X = tl.where(isk[:, None], Xk.to(tl.float32), X)
            Xc = X
            bts = tl.load(beta_ptr + rows, mask=mt & colr, other=0.0).to(tl.float32)
        else:
            Xc = tl.load(k_ptr + krows[:, None] * K + offs_k[None, :], mask=mtk, other=0.0).to(tl.float32)
        mw = mt & colr                                                      # the window rows
        offs_j = tl.arange(0, RP)
        mj = offs_j < h
        ej = ring0 + offs_j
        Kr = tl.load(rk_ptr + (ring0k + offs_j)[:, None] * K + offs_k[None, :], mask=mj[:, None] & mk[None, :],
                     other=0.0).to(tl.float32)
        # cumulative log decays G_{h+t} = G_{h+t-1} + g_t, token by token (the ring's fp32 order), on both rows of
        # a token; per-key decays (kda): the ring and window key products of token t's rows in the same loop
        if GK == 1:
            Gr = tl.load(rg_ptr + ej, mask=mj, other=0.0)
            Gprev = tl.load(rg_ptr + ring0 + h - 1, mask=h > 0, other=0.0)
            Gs = tl.zeros([TR], dtype=tl.float32)
            for t in tl.static_range(T):
                Gprev = Gprev + tl.load(g_ptr + (b.to(tl.int64) * T + t) * HV + head, mask=t < nt, other=0.0)
                Gs = tl.where(tok == t, Gprev, Gs)
            gX = X * tl.exp(Gs)[:, None]
            Dq = tl.exp(tl.minimum(Gs[:, None] - Gr[None, :], 0.0))   # padded rows: G 0, no overflow
            Cm = tl.dot(X, tl.trans(Kr), input_precision=DOTP) * Dq
            Dw = tl.exp(tl.minimum(Gs[:, None] - Gs[None, :], 0.0))
            W = tl.dot(X, tl.trans(Xc), input_precision=DOTP) * Dw
        else:
            Gr = tl.load(rg_ptr + ej[:, None] * GK + offs_k[None, :], mask=mj[:, None] & mk[None, :], other=0.0)
            Gprev = tl.load(rg_ptr + (ring0 + h - 1) * GK + offs_k, mask=mk & (h > 0), other=0.0)
            Gs = tl.zeros([TR, BK], dtype=tl.float32)
            Cm = tl.zeros([TR, RP], dtype=tl.float32)
            W = tl.zeros([TR, TR], dtype=tl.float32)
            for t in tl.static_range(T):
                row = (b.to(tl.int64) * T + t) * HV + head
                mtt = mk & (t < nt)
                Gprev = Gprev + tl.load(g_ptr + row * K + offs_k, mask=mtt, other=0.0)
                Gs = tl.where((tok == t)[:, None], Gprev[None, :], Gs)
                dec = tl.exp(tl.minimum(Gprev[None, :] - Gr, 0.0))
                dw = tl.exp(tl.minimum(Gprev[None, :] - Gs, 0.0))
                qt = tl.load(q_ptr + row * K + offs_k, mask=mtt, other=0.0).to(tl.float32)
                selq = (offs_r == t)[:, None]
                Cm = tl.where(selq, tl.sum(Kr * dec * qt[None, :], 1)[None, :], Cm)
                W = tl.where(selq, tl.sum(Xc * dw * qt[None, :], 1)[None, :], W)
                if DELTA:
                    krow = key_row(b.to(tl.int64) * T + t, head, HV, HG)
                    kt = tl.load(k_ptr + krow * K + offs_k, mask=mtt, other=0.0).to(tl.float32)
                    selk = (offs_r == TH + t)[:, None]
                    Cm = tl.where(selk, tl.sum(Kr * dec * kt[None, :], 1)[None, :], Cm)
                    W = tl.where(selk, tl.sum(Xc * dw * kt[None, :], 1)[None, :], W)
            gX = X * tl.exp(Gs)
        Cm = tl.where(mj[None, :], Cm, 0.0)
        keep = colr[None, :] & ((tok[None, :] < tok[:, None]) | ((~isk)[:, None] & (tok[None, :] == tok[:, None])))
        W = tl.where(keep, W, 0.0)
        if DELTA:
            Minv = _nilpotent_inverse(W * bts[:, None], TR, TRLOG, DOTP)
        # the value side, block by block: one pass over the read copy's rows for all T tokens (and their keys)
        for vb in range(NVB):
            offs_v = (pv * NVB + vb) * BV + tl.arange(0, BV)
            mv = offs_v < V
            mwv = mw[:, None] & mv[None, :]
            if DELTA:
                Ur = tl.load(ru_ptr + ej[:, None] * V + offs_v[None, :], mask=mj[:, None] & mv[None, :], other=0.0)
            else:
                Ur = tl.load(rv_ptr + ej[:, None] * V + offs_v[None, :], mask=mj[:, None] & mv[None, :],
                             other=0.0).to(tl.float32)
            Vc = tl.load(v_ptr + rows[:, None] * V + offs_v[None, :], mask=mwv, other=0.0).to(tl.float32)
            S = _load_tile(lp0, lp1, lp2, sh, offs_v, offs_k, mv, mk, K, V, FMT_LP, BK)   # [BV, BK]
            Z = tl.dot(Cm, Ur, input_precision=DOTP) + tl.dot(gX, tl.trans(S), input_precision=DOTP)   # [TR, BV]
            if DELTA:
                U = tl.dot(Minv, bts[:, None] * (Vc - Z), input_precision=DOTP)
            else:
                U = Vc
            O = Z + tl.dot(W, U, input_precision=DOTP)
            tl.store(out_ptr + rows[:, None] * V + offs_v[None, :], O, mask=(mq & mt)[:, None] & mv[None, :])
            # the window's entries past the committed ones (ring positions h + t)
            eh = ring0 + h + tok
            if DELTA:
                tl.store(ru_ptr + eh[:, None] * V + offs_v[None, :], U, mask=mwv)
            if not CACHED:
                tl.store(rv_ptr + eh[:, None] * V + offs_v[None, :], Vc.to(rv_ptr.dtype.element_ty), mask=mwv)
            if DRAFT:
                if CACHED:
                    ed = sh * TM + tok
                    tl.store(dv_ptr + ed[:, None] * V + offs_v[None, :], Vc.to(dv_ptr.dtype.element_ty), mask=mwv)
        # the key side's entries and the draft buffers, once per (row, head)
        eh = ring0 + h + tok
        lead = mw & (pv == 0)
        ehk = ring0k + h + tok
        if HG == 1:
            klead = lead
        else:                                   # a key head's first value head appends its keys
            klead = lead & (head % HG == 0)
        tl.store(rk_ptr + ehk[:, None] * K + offs_k[None, :], Xc.to(rk_ptr.dtype.element_ty),
                 mask=klead[:, None] & mk[None, :])
        ed = sh * TM + tok
        if GK == 1:
            tl.store(rg_ptr + eh, Gs, mask=lead)
        else:
            tl.store(rg_ptr + eh[:, None] * GK + offs_k[None, :], Gs, mask=lead[:, None] & mk[None, :])
        if DELTA and not CACHED:
            tl.store(rb_ptr + eh, bts, mask=lead)
        if DRAFT:
            if GK == 1:
                graw = tl.load(g_ptr + rows, mask=lead, other=0.0)
                tl.store(dg_ptr + ed, graw, mask=lead)
            else:
                graw = tl.load(g_ptr + rows[:, None] * K + offs_k[None, :], mask=lead[:, None] & mk[None, :],
                               other=0.0)
                tl.store(dg_ptr + ed[:, None] * GK + offs_k[None, :], graw, mask=lead[:, None] & mk[None, :])
            if CACHED:
                tl.store(db_ptr + ed, bts, mask=lead)


def verify_block_v(cache, batch: int) -> int:
    """Value rows per verify block (``batch`` is unused by the rule; kept for the knob-free call sites): the whole
    head, except 32 rows for per-key decays (kda) on the GPU; the ``block_v`` knob overrides (why: docs/TUNING.md)."""
    full = value_rows(cache.head_v)
    if cache.knobs.block_v:
        return max(16, min(full, cache.knobs.block_v))
    if cache.device.type == "cuda" and cache.per_key:
        return min(full, 32)
    return full


def verify_split(cache, blocks: int) -> int:
    """Programs per (row, head) over its ``blocks`` value blocks: each computes the key side once and loops over
    ``blocks / split`` blocks; the ``verify_split`` knob (a power of two, capped at ``blocks``) or 1 (why:
    docs/TUNING.md)."""
    return min(blocks, cache.knobs.verify_split or 1)


def verify_warps(cache) -> int:
    """Warps per verify program: 4 (the ``verify_warps`` knob: an override; why: docs/TUNING.md)."""
    return cache.knobs.verify_warps or 4


def verify_dot(cache) -> str:
    """Input precision of the verify's fp32 dots: ``"tf32x3"`` on the GPU (tensor cores, within the oracle bound:
    docs/TUNING.md), ``"ieee"`` in the interpreter (the torch mirror's numpy matmuls); the ``verify_dot`` knob
    overrides."""
    return cache.knobs.verify_dot or ("tf32x3" if cache.device.type == "cuda" else "ieee")


def triton_verify(cache, slots, q, k, v, g, beta, counts, write_draft: bool, out, zero_h: bool = False):
    """Launch :func:`_verify_kernel`: ``counts[b]`` (int32 ``[B]``, <= T; None: T) tokens of each row. ``q [B, T,
    HV, K]``, ``k [B, T, HK, K]`` (HK = ``cache.num_key_heads``), ``v [B, T, HV, V]``, ``g [B, T, HV, GK]``,
    ``beta [B, T, HV]`` (any float, contiguous); ``out`` float32 ``[B, T, HV, V]``. ``write_draft``: the draft
    buffers and counts too (a user's verify); ``zero_h``: the rows' committed count is taken as 0 (the tail after a
    flush). Returns ``out``."""
    B, T, HV, V = v.shape
    if B == 0:
        return out
    lp = cache.lp.kernel_tensors()
    cached = cached_corrections(cache)
    BV = verify_block_v(cache, B)
    blocks = triton.cdiv(V, BV)
    split = verify_split(cache, blocks)
    TH, TR = verify_rows_layout(T, cache.delta)
    C = cache.ring_k.shape[2]
    bk = block_k(cache.head_k)
    warps = verify_warps(cache)
    draft = dict(dg_ptr=cache.draft_g, dv_ptr=cache.draft_v if cached else None,
                 db_ptr=cache.draft_beta if cached else None, dcnt_ptr=cache.draft_count) if write_draft else \
        dict(dg_ptr=None, dv_ptr=None, db_ptr=None, dcnt_ptr=None)
    _verify_kernel[(split, HV, B)](
        q_ptr=q, k_ptr=k, v_ptr=v, g_ptr=g, beta_ptr=beta if cache.delta else None, idx_ptr=slots,
        ntok_ptr=counts, out_ptr=out, lp0=lp[0], lp1=lp[1], lp2=lp[2], rg_ptr=cache.ring_g, rk_ptr=cache.ring_k,
        rv_ptr=None if cached else cache.ring_v, rb_ptr=cache.ring_beta if cache.delta and not cached else None,
        ru_ptr=cache.ring_u, cnt_ptr=cache.ring_count, **draft, HV=HV, T=T, TH=TH, TR=TR,
        TRLOG=TR.bit_length() - 1, K=cache.head_k, V=V, C=C, RP=verify_ring_entries(C), TM=cache.max_draft, BK=bk,
        BV=BV, NVB=triton.cdiv(blocks, split), GK=cache.head_k if cache.per_key else 1, DELTA=cache.delta,
        FMT_LP=FORMAT_CODE[cache.spec.read.name], CACHED=cached, ZERO_H=zero_h, DOTP=verify_dot(cache),
        HG=cache.key_group, **launch_options(v.device, warps))
    return out


# ------------------------------------------------------------------------------------------- conventional
@triton.jit
def _conventional_verify_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, sp0, sp1, sp2, fcnt_ptr, dcnt_ptr, seed,
    HV, T: tl.constexpr, TM: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    GK: tl.constexpr, DELTA: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    HG: tl.constexpr,
):
    """The snapshot baseline: T conventional steps of (row b, head, value rows ``pv * BV ..``) from one read of the
    checkpoint; token t's output from the fp32 state, its state rounded into snapshot ``slot * TM + t`` (SR counter
    c2 = flush counter + t) and re-read (the rounded state continues); ``dcnt[slot] = T``. nvfp4: ``BV`` is the
    whole head. ``HG``: value heads per key head (k ``[B, T, HV // HG, K]``, :func:`.tiles.key_row`)."""
    pv = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    offs_v = pv * BV + tl.arange(0, BV)
    mv = offs_v < V
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    slot = tl.load(idx_ptr + b).to(tl.int64)
    tl.store(dcnt_ptr + slot, T, mask=(slot >= 0) & (pv == 0) & (head == 0))
    if slot < 0:
        for t in tl.static_range(T):
            row = (b.to(tl.int64) * T + t) * HV + head
            tl.store(out_ptr + row * V + offs_v, tl.zeros([BV], dtype=tl.float32), mask=mv)
    else:
        sh = slot * HV + head
        fc = tl.load(fcnt_ptr + slot)
        S = _load_tile(hp0, hp1, hp2, sh, offs_v, offs_k, mv, mk, K, V, FMT, BK)
        for t in tl.static_range(T):
            row = (b.to(tl.int64) * T + t) * HV + head
            krow = key_row(b.to(tl.int64) * T + t, head, HV, HG)
            q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, row, offs_k, mk, K, BK, GK, DELTA,
                                                     krow)
            vt = tl.load(v_ptr + row * V + offs_v, mask=mv, other=0.0).to(tl.float32)
            S, _ = _seq_step(S, tl.exp(gt), kt, vt, beta, DELTA)
            tl.store(out_ptr + row * V + offs_v, tl.sum(S * q[None, :], 1), mask=mv)
            ss = (slot * TM + t) * HV + head
            if FMT == fcode.NVFP4:
                s_enc = nvfp4_encode_scale(nvfp4_amax(S))
                tl.store(sp2 + ss, s_enc)
            else:
                s_enc = 1.0
            _store_tile(S, sp0, sp1, sp2, ss, offs_v, offs_k, mv, mk, K, V, seed, sh, fc + t, s_enc, FMT, SR, TAG,
                        BK)
            if FMT != fcode.FP32:
                tl.debug_barrier()   # the snapshot's bits are visible to every thread of the program
                S = _load_tile(sp0, sp1, sp2, ss, offs_v, offs_k, mv, mk, K, V, FMT, BK)


def triton_conventional_verify(cache, slots, q, k, v, g, beta, out):
    """Launch :func:`_conventional_verify_kernel` (inputs as :func:`triton_verify`)."""
    from .launch import choose_block_v

    B, T, HV, V = v.shape
    if B == 0:
        return out
    fmt = cache.spec.recur.name
    bk = block_k(cache.head_k)
    BV = value_rows(V) if fmt == "nvfp4" else max(16, choose_block_v(cache, B))
    BV = min(BV, value_rows(V))
    hp, sp = cache.hp.kernel_tensors(), cache.snap.kernel_tensors()
    _conventional_verify_kernel[(triton.cdiv(V, BV), HV, B)](
        q_ptr=q, k_ptr=k, v_ptr=v, g_ptr=g, beta_ptr=beta if cache.delta else None, idx_ptr=slots, out_ptr=out,
        hp0=hp[0], hp1=hp[1], hp2=hp[2], sp0=sp[0], sp1=sp[1], sp2=sp[2], fcnt_ptr=cache.flush_count,
        dcnt_ptr=cache.draft_count,
        seed=cache.seed, HV=HV, T=T, TM=cache.max_draft, K=cache.head_k, V=V, BK=bk, BV=BV,
        GK=cache.head_k if cache.per_key else 1, DELTA=cache.delta, FMT=FORMAT_CODE[fmt], SR=cache.spec.sr,
        TAG=cache.tag, HG=cache.key_group, **launch_options(v.device, max(4, min(16, BV * bk // 1024))))
    return out


@triton.jit
def _restore_kernel(src_ptr, dst_ptr, idx_ptr, acc_ptr, fcnt_ptr, dcnt_ptr, HV, E: tl.constexpr, TM: tl.constexpr,
                    BLOCK: tl.constexpr):
    """Copy the ``E`` elements of (slot, head) state part ``src[(slot * TM + accepted - 1) * HV + head]`` into
    ``dst[slot * HV + head]``; grid ``(B, HV)``, padded rows skipped. With ``fcnt_ptr`` (one launch of a commit): the
    slot's flush counter + accepted (the conventional steps' counter) and its pending verify count 0."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(idx_ptr + b).to(tl.int64)
    if slot >= 0:
        a = tl.load(acc_ptr + b).to(tl.int64)
        src = src_ptr + ((slot * TM + a - 1) * HV + head) * E
        dst = dst_ptr + (slot * HV + head) * E
        for e0 in tl.static_range(0, E, BLOCK):
            offs = e0 + tl.arange(0, BLOCK)
            m = offs < E
            tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)
        if fcnt_ptr is not None:
            if head == 0:
                tl.store(fcnt_ptr + slot, tl.load(fcnt_ptr + slot) + a.to(tl.int32))
                tl.store(dcnt_ptr + slot, 0)


def triton_restore(cache, slots, accepted) -> None:
    """Conventional commit: every part of the checkpoint from the accepted snapshot (one launch per part; the first
    also moves the counters)."""
    B, HV = slots.numel(), cache.num_heads
    if B == 0:
        return
    first = True
    for dst, src in zip(cache.hp.kernel_tensors(), cache.snap.kernel_tensors()):
        if dst is None:
            continue
        E = dst[0, 0].numel()
        cnt = dict(fcnt_ptr=cache.flush_count, dcnt_ptr=cache.draft_count) if first else \
            dict(fcnt_ptr=None, dcnt_ptr=None)
        _restore_kernel[(B, HV)](src_ptr=src, dst_ptr=dst, idx_ptr=slots, acc_ptr=accepted, **cnt, HV=HV, E=E,
                                 TM=cache.max_draft, BLOCK=min(4096, triton.next_power_of_2(E)))
        first = False


# ------------------------------------------------------------------------------------------- replay commit
@triton.jit
def _commit_prep_kernel(
    idx_ptr, acc_ptr, cnt_ptr, rk_ptr, rv_ptr, rb_ptr, dg_ptr, dv_ptr, db_ptr,
    fk_ptr, fv_ptr, fg_ptr, fb_ptr, tk_ptr, tv_ptr, tg_ptr, tb_ptr, idxf_ptr, idxt_ptr, ntail_ptr, flcnt_ptr,
    newcnt_ptr, fl_ptr, fq_ptr, tq_ptr,
    HV, K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, L: tl.constexpr, TM: tl.constexpr, BK: tl.constexpr,
    BVA: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr, CACHED: tl.constexpr, HG: tl.constexpr,
):
    """First launch of a replay commit, grid ``(B, HV)`` (``spec_decode`` module doc): h' = h + accepted; a row
    whose commit reaches the window's L-th token flushes (``fl[b]``, ``idxf[b] = slot``, else -1; ``flcnt[b]``: the
    ring count the flush launch must see, L - 1 for a flushing row), and per head the flush input (ring entry
    L - 1: ``fk [B, HK, K]``, ``fv``, ``fg [B, HV, GK]``, ``fb``) and the committed tail (``ntail[b] = h' - L``
    tokens, ring positions L.., ``tk [B, TM - 1, HK, K]``, ``tv``, ``tg``, ``tb``; ``idxt[b] = slot`` when
    non-empty) are gathered from the ring and the draft buffers; ``newcnt[b]`` is the count after the commit. The
    counts themselves are written by :func:`_commit_counts_kernel` (every head's program reads them here). Keys
    per key head (``HG`` value heads per key head, :func:`.tiles.key_row`; written by the group's first head);
    with ``fq_ptr`` (``HG`` > 1) also per value head, ``fq [B, HV, K]`` and ``tq [B, TM - 1, HV, K]``: the flush
    step's and the tail verify's queries, whose outputs are dropped (finite values: any NaN would reach the
    verify's solve through its query rows, zeroed there by a multiplication)."""
    b = tl.program_id(0)
    hd = tl.program_id(1)
    slot = tl.load(idx_ptr + b).to(tl.int64)
    valid = slot >= 0
    s = tl.maximum(slot, 0)
    h = tl.load(cnt_ptr + s)
    hn = h + tl.load(acc_ptr + b)
    flush = valid & (hn >= L)
    tail = tl.where(flush, hn - L, 0)
    if hd == 0:
        tl.store(idxf_ptr + b, tl.where(flush, slot, -1))
        tl.store(idxt_ptr + b, tl.where(tail > 0, slot, -1))
        tl.store(ntail_ptr + b, tail)
        tl.store(flcnt_ptr + b, tl.where(flush, L - 1, h))
        tl.store(newcnt_ptr + b, tl.where(flush, tail, hn))
        tl.store(fl_ptr + b, flush.to(tl.int32))
    if flush:
        offs_k = tl.arange(0, BK)
        mk = offs_k < K
        offs_v = tl.arange(0, BVA)
        mv = offs_v < V
        j = L - 1 - h                    # the verify token at ring position L - 1
        sh = s * HV + hd
        fr = b.to(tl.int64) * HV + hd
        e = sh * C + L - 1
        ringk0 = key_row(s, hd, HV, HG) * C
        lead = hd % HG == 0                # the key head's first value head writes its keys
        kf = tl.load(rk_ptr + (ringk0 + L - 1) * K + offs_k, mask=mk)
        tl.store(fk_ptr + key_row(b.to(tl.int64), hd, HV, HG) * K + offs_k, kf, mask=mk & lead)
        if fq_ptr is not None:
            tl.store(fq_ptr + fr * K + offs_k, kf, mask=mk)
        ed = sh * TM + j
        if GK == 1:
            tl.store(fg_ptr + fr, tl.load(dg_ptr + ed))
        else:
            tl.store(fg_ptr + fr * K + offs_k, tl.load(dg_ptr + ed * GK + offs_k, mask=mk), mask=mk)
        if CACHED:
            tl.store(fv_ptr + fr * V + offs_v, tl.load(dv_ptr + ed * V + offs_v, mask=mv), mask=mv)
            tl.store(fb_ptr + fr, tl.load(db_ptr + ed))
        else:
            tl.store(fv_ptr + fr * V + offs_v, tl.load(rv_ptr + e * V + offs_v, mask=mv), mask=mv)
            if DELTA:
                tl.store(fb_ptr + fr, tl.load(rb_ptr + e))
        for i in tl.static_range(TM - 1):   # the committed tail: ring positions L + i, verify tokens j + 1 + i
            m = i < tail
            tr = (b.to(tl.int64) * (TM - 1) + i) * HV + hd
            et = sh * C + L + i
            edt = sh * TM + j + 1 + i
            kt = tl.load(rk_ptr + (ringk0 + L + i) * K + offs_k, mask=mk & m)
            trk = key_row(b.to(tl.int64) * (TM - 1) + i, hd, HV, HG)
            tl.store(tk_ptr + trk * K + offs_k, kt, mask=mk & m & lead)
            if tq_ptr is not None:
                tl.store(tq_ptr + tr * K + offs_k, kt, mask=mk & m)
            if GK == 1:
                tl.store(tg_ptr + tr, tl.load(dg_ptr + edt, mask=m), mask=m)
            else:
                tl.store(tg_ptr + tr * K + offs_k, tl.load(dg_ptr + edt * GK + offs_k, mask=mk & m), mask=mk & m)
            if CACHED:
                tl.store(tv_ptr + tr * V + offs_v, tl.load(dv_ptr + edt * V + offs_v, mask=mv & m), mask=mv & m)
                tl.store(tb_ptr + tr, tl.load(db_ptr + edt, mask=m), mask=m)
            else:
                tl.store(tv_ptr + tr * V + offs_v, tl.load(rv_ptr + et * V + offs_v, mask=mv & m), mask=mv & m)
                if DELTA:
                    tl.store(tb_ptr + tr, tl.load(rb_ptr + et, mask=m), mask=m)


@triton.jit
def _commit_counts_kernel(idx_ptr, val_ptr, cnt_ptr, B, BLOCK: tl.constexpr, fl_ptr=None, fcnt_ptr=None,
                          dcnt_ptr=None):
    """Per row with a slot: ring count <- ``val[b]``; with ``fl_ptr`` (the commit's last launch) also flush counter +
    ``fl[b]`` and pending verify count 0."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < B
    slot = tl.load(idx_ptr + offs, mask=m, other=-1).to(tl.int64)
    ok = m & (slot >= 0)
    tl.store(cnt_ptr + slot, tl.load(val_ptr + offs, mask=ok), mask=ok)
    if fl_ptr is not None:
        tl.store(fcnt_ptr + slot, tl.load(fcnt_ptr + slot, mask=ok) + tl.load(fl_ptr + offs, mask=ok), mask=ok)
        tl.store(dcnt_ptr + slot, tl.zeros([BLOCK], dtype=tl.int32), mask=ok)


def triton_commit(cache, slots, accepted) -> None:
    """Replay commit on the device (:mod:`.spec_decode`): :func:`_commit_prep_kernel`, :func:`_commit_counts_kernel`
    (ring count L - 1 for flushing rows), the flush of the flushing rows (:func:`.decode.triton_step`), the committed
    tails' verify from the new read copy (:func:`triton_verify`, ``zero_h``), :func:`_commit_counts_kernel` (the
    counts after the commit). No host synchronisation."""
    from .decode import triton_step

    B, HV, K, V, Tm = slots.numel(), cache.num_heads, cache.head_k, cache.head_v, cache.max_draft
    HK, HG = cache.num_key_heads, cache.key_group
    if B == 0:
        return
    dev = slots.device
    cached = cached_corrections(cache)
    GK = K if cache.per_key else 1
    act, f32, i32 = dict(dtype=cache.ring_k.dtype, device=dev), dict(dtype=torch.float32, device=dev), \
        dict(dtype=torch.int32, device=dev)
    vdt = dict(dtype=(cache.draft_v if cached else cache.ring_v).dtype, device=dev)
    gpu = dev.type == "cuda"
    new = torch.empty if gpu else torch.zeros   # (rows that do not flush never read theirs; zeros keep numpy quiet)
    fk, fv = new(B, HK, K, **act), new(B, HV, V, **vdt)
    fg, fb = new(B, HV, GK, **f32), new(B, HV, **f32)
    T1 = max(Tm - 1, 1)
    tk, tv = new(B, T1, HK, K, **act), new(B, T1, HV, V, **vdt)
    # the flush step's and the tail verify's queries (outputs dropped): the keys, per value head
    fq, tq = (fk, tk) if HG == 1 else (new(B, HV, K, **act), new(B, T1, HV, K, **act))
    tg, tb = new(B, T1, HV, GK, **f32), new(B, T1, HV, **f32)
    idxf, idxt, ntail, flcnt, newcnt, fl = (torch.empty(B, **i32) for _ in range(6))
    _commit_prep_kernel[(B, HV)](
        idx_ptr=slots, acc_ptr=accepted, cnt_ptr=cache.ring_count, rk_ptr=cache.ring_k,
        rv_ptr=None if cached else cache.ring_v, rb_ptr=cache.ring_beta if cache.delta and not cached else None,
        dg_ptr=cache.draft_g, dv_ptr=cache.draft_v if cached else None, db_ptr=cache.draft_beta if cached else None,
        fk_ptr=fk, fv_ptr=fv, fg_ptr=fg, fb_ptr=fb, tk_ptr=tk, tv_ptr=tv, tg_ptr=tg, tb_ptr=tb, idxf_ptr=idxf,
        idxt_ptr=idxt, ntail_ptr=ntail, flcnt_ptr=flcnt, newcnt_ptr=newcnt, fl_ptr=fl,
        fq_ptr=None if HG == 1 else fq, tq_ptr=None if HG == 1 else tq, HV=HV, K=K, V=V, C=cache.ring_k.shape[2],
        L=cache.window, TM=Tm, BK=block_k(K), BVA=value_rows(V), GK=GK, DELTA=cache.delta, CACHED=cached, HG=HG)
    BLOCK = min(1024, triton.next_power_of_2(B))
    _commit_counts_kernel[(triton.cdiv(B, BLOCK),)](idx_ptr=slots, val_ptr=flcnt, cnt_ptr=cache.ring_count, B=B,
                                                    BLOCK=BLOCK)
    out = torch.empty(B, HV, V, **f32)
    # (the interpreter runs every skipped program in Python: off the GPU, where a host sync costs nothing, launches
    # with no row to flush or no tail are skipped; on the GPU they run, a few microseconds, no sync)
    if gpu or bool((idxf >= 0).any()):
        triton_step(cache, idxf, fq, fk, fv, fg if cache.per_key else fg[..., 0], fb if cache.delta else None, out)
    if Tm > 1 and (gpu or bool((idxt >= 0).any())):
        tout = torch.empty(B, T1, HV, V, **f32)
        triton_verify(cache, idxt, tq, tk, tv, tg, tb, ntail, False, tout, zero_h=True)
    _commit_counts_kernel[(triton.cdiv(B, BLOCK),)](idx_ptr=slots, val_ptr=newcnt, cnt_ptr=cache.ring_count, B=B,
                                                    BLOCK=BLOCK, fl_ptr=fl, fcnt_ptr=cache.flush_count,
                                                    dcnt_ptr=cache.draft_count)
