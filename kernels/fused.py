"""The fused decode step: one program per (V-block, head, row), non-flush and flush rows alike.

Grid ``(cdiv(V, BV), HV, B)`` of :func:`_decode_step_kernel`; the V-block programs of one (row, head) are adjacent
in launch order, so the ring tiles they share come from L2. Used for small replay grids and for conventional
decoding (``L = 1``: every step a flush). Its program, :func:`_step_program`, is also the work item of the split
step's flush launch (:mod:`.flush`, ``FLUSH_ONLY``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode

from .flush_math import _commit_flush_rows, _flush_prep, _flush_S, _head_corrections_first
from .ring import (_append_keys, _append_rows, _current_log_decay, _load_ring_keys, _next_counts, _nonflush_rows,
                   _ring_coeffs)
from .rounding import nvfp4_amax, nvfp4_encode_scale
from .rowscaled import is_rowscaled
from .tiles import _decay_max, _load_read, _load_step_inputs, _store_head_scale, _vec4, key_row


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
    CACHED: tl.constexpr, FLUSH_ONLY: tl.constexpr, scr_ptr=None, DOTP: tl.constexpr = "ieee", UROWS: tl.constexpr = 0,
    SCR_L2: tl.constexpr = False, arr_ptr=None, nprog=1, ARRIVE_LANES: tl.constexpr = 0, amx_ptr=None, harr_ptr=None,
    SPREAD: tl.constexpr = False, HG: tl.constexpr = 1,
):
    """One (V-block ``pv``, head, row ``b``) of a decode step: the fused step's program, or (``FLUSH_ONLY``) a
    work item of the split step's flush launch. ``scr_ptr`` (an nvfp4 flush in two passes, ``NVF`` > 1; None
    otherwise): pass 1 keeps the fp32 S_L rows in the (row, head)'s ``[NVF * BVF, BK]`` scratch and pass 2 encodes
    them from there, so the encode takes the very S_L whose amax pass 1 took (a rebuild in pass 2 is slower, and on
    the GPU, where products contract into fmas as the compiler places them, its last bits depend on the code around
    it); ``SCR_L2``: with L2 eviction hints (stores ``evict_last``, reloads ``evict_first``). ``UROWS``:
    :func:`.flush._flush_kernel`. ``DOTP``: input precision of the flush's fp32 dots
    (:func:`.launch.flush_dot_precision`). ``arr_ptr`` (int32 ``[S + 1]``, ``SSMStateCache.step_arrivals``; None:
    the counters stay): the program counts in once it has read the row's counters, and the last of the row's
    ``nprog`` programs advances them (:func:`_arrive`, :func:`_advance_if_last`; ``ARRIVE_LANES``: 0, or the
    program's threads, 32 x its warps, to keep the arrival's reply in one thread: ``StepPlan.arrive_lanes``).
    ``SPREAD`` (fused grid, ``StepPlan.nvfp4_spread``): an nvfp4 two-pass flush spread over the head's V-block
    programs: each builds S_L of its rows into the head's scratch and stores their amax at ``amx_ptr[pv]`` (fp32, one
    per V-block), then counts in on ``harr_ptr`` (int32, zero before the step); the last to arrive resets it and
    encodes the whole head (pass 2) with the largest of the amaxes. ``HG``: value heads per key head
    (``SSMStateCache.key_group``): k and the ring's keys per key head (:func:`.tiles.key_row`), appended by the
    group's first head."""
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
    ring0k = key_row(tl.maximum(slot, 0), head, HV, HG) * L1
    h = tl.load(cnt_ptr + tl.maximum(slot, 0))
    fc = tl.load(fcnt_ptr + tl.maximum(slot, 0))   # with h: the program's only reads of the counters
    if L > 1 and not FLUSH_ONLY:
        # speculative non-flush loads (wasted on the 1-in-L flush step; L2 hits for its own re-reads):
        # the read-copy tile and ALL L-1 ring entries (allocated for every slot); validity j < h is
        # applied to the loaded values with tl.where (stale entries may hold anything, NaN included)
        S_nf, SB_nf = _load_read(lp0, lp1, lp2, sh, offs_v, offs_k, mv, mk, K, V, FMT_LP, BK)
        if FMT_LP == fcode.NVFP4:
            inv_nf = tl.math.div_rn(1.0, tl.load(lp2 + sh))
        else:
            inv_nf = 1.0
        offs_j = tl.arange(0, L1P)
        mr = offs_j < L1
        ej = ring0 + offs_j
        Kr_nf, g_nf = _load_ring_keys(rk_ptr, rg_ptr, ej, mr, offs_k, mk, K, GK, ring0k + offs_j)
        if DELTA:
            Ur_nf = tl.load(ru_ptr + ej[:, None] * V + offs_v[None, :], mask=mr[:, None] & mv[None, :], other=0.0)
        else:
            Ur_nf = tl.load(rv_ptr + ej[:, None] * V + _vec4(offs_v)[None, :], mask=mr[:, None] & mv[None, :],
                            other=0.0).to(tl.float32)
    # the inputs after the speculative tiles: their casts convert layouts through shared memory (block barriers),
    # which no load of the step should wait behind (:func:`.tiles._load_step_inputs`)
    vt = tl.load(v_ptr + bh * V + offs_v, mask=mv, other=0.0).to(tl.float32)
    q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K, BK, GK, DELTA,
                                             key_row(b.to(tl.int64), head, HV, HG))
    arrived = _arrive(arr_ptr, slot, ARRIVE_LANES)
    at = tl.exp(gt)
    if slot < 0:
        if not FLUSH_ONLY:   # padded row: zero output (written by the fused or the non-flush launch)
            tl.store(out_ptr + bh * V + offs_v, tl.zeros([BV], dtype=tl.float32), mask=mv)
    else:
        if h + 1 >= L:
            # ---- flush: S_hp + ring -> S_L in registers (corrections: cached for shared delta-rule specs,
            # recomputed from S_hp for separate ones) -> both checkpoints.
            # Rows are independent: tiles are processed in sub-blocks of BVF rows (fewer registers). Programs of
            # fewer rows than a sub-block (BV < BVF: the flush's tl.dot needs 16) flush in groups of BVF // BV: the
            # group's first program flushes the group's BVF rows, the others none.
            if BV < BVF:
                flush_lead = pv % (BVF // BV) == 0
            else:
                flush_lead: tl.constexpr = True
            SUBS: tl.constexpr = max(BV // BVF, 1)   # flush sub-blocks of a lead program
            if NV4:
                # nvfp4 needs the amax of the whole (slot, head) state: in two passes (S_L into the head's
                # scratch and its amax, then the encode), by the pv == 0 program or (SPREAD) pass 1 by every
                # V-block program and pass 2 by the last to arrive; the branch is chosen by constexprs (a kernel
                # with one sub-block has no scratch, and must not compile the two-pass code)
                if NVF == 1:
                    if pv == 0:
                        # the whole head fits one sub-block: one pass, S_L stays in registers
                        Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_terms(
                            rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, at, offs_k, mk, K, L, LP, GK, DELTA, BK,
                            LPLOG, CACHED, DOTP, ring0k)
                        offs_f = tl.arange(0, BVF)
                        mf = offs_f < V
                        S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta,
                                     Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA,
                                     FMT_HP, BK, CACHED, DOTP=DOTP)
                        s_enc = nvfp4_encode_scale(nvfp4_amax(S))
                        _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, mf,
                                           mk, K, V, seed, fc, s_enc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
                        _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP, FMT_LP)
                elif SPREAD:
                    tl.static_assert(scr_ptr is not None, "a two-pass nvfp4 flush needs its S_L scratch")
                    amax = 0.0
                    if flush_lead:
                        Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_terms(
                            rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, at, offs_k, mk, K, L, LP, GK, DELTA, BK,
                            LPLOG, CACHED, DOTP, ring0k)
                        for r in tl.range(0, SUBS, loop_unroll_factor=1):   # pass 1 of this program's rows
                            offs_f = pv * BV + r * BVF + tl.arange(0, BVF)
                            S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta,
                                         Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, offs_f < V, offs_k, mk, K, V,
                                         L, LP, DELTA, FMT_HP, BK, CACHED, 0, DOTP=DOTP)
                            # (rows past V hold S = 0, as in the head program's pass 1; past the scratch: none stored)
                            tl.store(scr_ptr + offs_f[:, None] * BK + offs_k[None, :], S,
                                     mask=(offs_f < NVF * BVF)[:, None])
                            amax = tl.maximum(amax, nvfp4_amax(S))
                    tl.store(amx_ptr + pv, amax)
                    tl.debug_barrier()   # every thread's rows and the amax stored before the release
                    nvb = tl.num_programs(0)
                    # the count's reply reaches every thread through a block barrier, so the last program's loads
                    # below follow its acquire; they read past L1 (.cg): the other programs' rows came through L2
                    if tl.atomic_add(harr_ptr, 1, sem="acq_rel") == nvb - 1:
                        tl.atomic_xchg(harr_ptr, 0)
                        amax = 0.0   # (a max: the same value in any order)
                        i = 0
                        while i < nvb:   # (a range() with a runtime bound fails in the Triton 3.6 interpreter)
                            amax = tl.maximum(amax, tl.load(amx_ptr + i, cache_modifier=".cg"))
                            i += 1
                        _encode_head(scr_ptr, nvfp4_encode_scale(amax), q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2,
                                     sh, offs_k, mk, K, V, seed, fc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK, BVF, NVF, "",
                                     ".cg")
                else:
                    if pv == 0:
                        tl.static_assert(scr_ptr is not None, "a two-pass nvfp4 flush needs its S_L scratch")
                        Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_terms(
                            rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, at, offs_k, mk, K, L, LP, GK, DELTA, BK,
                            LPLOG, CACHED, DOTP, ring0k)
                        PREU: tl.constexpr = DELTA and (not CACHED) and L > 1 and UROWS > 0
                        if PREU:   # the whole head's corrections first, UROWS rows at a time; pass 1 reloads them
                            _head_corrections_first(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, Kd,
                                                    Kdl, T, br, offs_k, mk, K, V, L, LP, FMT_HP, BK, DOTP, UROWS)
                            tl.debug_barrier()
                        amax = 0.0
                        for r in tl.range(0, NVF, loop_unroll_factor=1):
                            offs_f = r * BVF + tl.arange(0, BVF)
                            mf = offs_f < V
                            S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta, Kd,
                                         Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA,
                                         FMT_HP, BK, CACHED, 2 if PREU else 0, DOTP=DOTP)
                            # SCR_L2: keep the rows in L2 until pass 2 reloads them (a line evicted dirty costs a
                            # DRAM write and the reload a DRAM read); the reload is their last use
                            tl.store(scr_ptr + offs_f[:, None] * BK + offs_k[None, :], S,
                                     eviction_policy="evict_last" if SCR_L2 else "")
                            amax = tl.maximum(amax, nvfp4_amax(S))
                        tl.debug_barrier()   # pass 1's S_L rows are visible to every thread of pass 2
                        _encode_head(scr_ptr, nvfp4_encode_scale(amax), q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2,
                                     sh, offs_k, mk, K, V, seed, fc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK, BVF, NVF,
                                     "evict_first" if SCR_L2 else "", "")
            elif flush_lead:
                Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_terms(
                    rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, at, offs_k, mk, K, L, LP, GK, DELTA, BK,
                    LPLOG, CACHED, DOTP, ring0k)
                for r in tl.range(0, SUBS, loop_unroll_factor=1):
                    offs_f = pv * BV + r * BVF + tl.arange(0, BVF)
                    mf = offs_f < V
                    S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta, Kd, Kdl,
                                 Kd2, Kd2l, dL, T, br, kdl, cl, offs_f, mf, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK,
                                 CACHED, 0, DOTP)
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
                gam = tl.exp(Gt)   # GK = 1: Gt is the scalar Gts broadcast, so exp(Gts) is its max
                o, u = _nonflush_rows(S_nf, SB_nf, inv_nf, Ur, cq, ck, gam, _decay_max(gam, tl.exp(Gts), GK), q, kt,
                                      vt, beta, DELTA, FMT_LP == fcode.NVFP4, is_rowscaled(FMT_LP))
                tl.store(out_ptr + bh * V + offs_v, o, mask=mv)
                eh = ring0 + h
                _append_rows(ru_ptr, rv_ptr, eh, u, vt, offs_v, mv, V, DELTA, CACHED)
                _append_keys(rk_ptr, rg_ptr, rb_ptr, eh, kt, Gt, beta, offs_k, mk, pv == 0, K, GK, DELTA, CACHED,
                             ring0k + h, head % HG == 0)
    _advance_if_last(arr_ptr, cnt_ptr, fcnt_ptr, slot, arrived, nprog, h, fc, L, ARRIVE_LANES)


@triton.jit
def _flush_terms(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, at, offs_k, mk, K: tl.constexpr, L: tl.constexpr,
                 LP: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr, BK: tl.constexpr, LPLOG: tl.constexpr,
                 CACHED: tl.constexpr, DOTP: tl.constexpr, ring0k):
    """The per-(row, head) terms of the chunked flush, shared by a program's sub-blocks
    (:func:`.flush_math._flush_prep`; built only by the programs that flush rows); conventional decoding (``L`` = 1,
    no ring): placeholders (``kt`` for the tiles, ``at`` = exp(g_t) for the vectors)."""
    if L > 1:
        Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_prep(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta, offs_k,
                                                             mk, K, L, LP, GK, DELTA, BK, LPLOG, CACHED, DOTP, ring0k)
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
    return Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl


@triton.jit
def _encode_head(scr_ptr, s_enc, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_k, mk, K, V, seed, fc,
                 FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr,
                 TAG: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr, EVICT: tl.constexpr,
                 CACHE: tl.constexpr):
    """Pass 2 of a two-pass nvfp4 flush: the head's S_L rows from its scratch (fp32 ``[NVF * BVF, BK]``, loaded with
    ``EVICT`` / ``CACHE`` as ``tl.load``'s ``eviction_policy`` / ``cache_modifier``) -> outputs and both casts with the
    head's encode scale ``s_enc`` (:func:`.flush_math._commit_flush_rows`), then the head's scale."""
    for r in tl.range(0, NVF, loop_unroll_factor=1):
        offs_f = r * BVF + tl.arange(0, BVF)
        S = tl.load(scr_ptr + offs_f[:, None] * BK + offs_k[None, :], eviction_policy=EVICT, cache_modifier=CACHE)
        _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, offs_f < V, mk, K, V,
                           seed, fc, s_enc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
    _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP, FMT_LP)


@triton.jit
def _arrive(arr_ptr, slot, LANES: tl.constexpr):
    """Count the program in on its row's slot (``arr_ptr``: int32 per slot, zero between steps) once all its
    threads have read the slot's counters (the barrier); the count before it is read by :func:`_advance_if_last`
    (-1 for a padded row, ``slot`` < 0, and without ``arr_ptr``). Called mid-program, after the loads are issued:
    a release waits for those loads (which the compute waits for anyway), not for the program's stores.

    ``LANES`` = 0: a scalar atomic, returns the count. Triton hands a scalar atomic's reply to every thread through
    shared memory right at the atomic, so every program waits one atomic round trip here. ``LANES`` = the program's
    threads (32 x warps: one lane per thread, none held twice): lane 0 of a ``[LANES]`` tensor adds the count and
    the reply stays in that thread's register until :func:`_advance_if_last` reduces it at the program's end;
    returns int32 ``[LANES]``. The masked lanes' addresses differ (never accessed): with one address for the warp,
    ptxas aggregates the atomic per warp and shuffles its reply at once, the wait this form avoids."""
    if LANES == 0:
        arrived = -1
        if arr_ptr is not None:
            if slot >= 0:
                tl.debug_barrier()
                arrived = tl.atomic_add(arr_ptr + slot, 1, sem="release")
    else:
        lane = tl.arange(0, LANES)
        arrived = tl.full([LANES], -1, tl.int32)
        if arr_ptr is not None:
            if slot >= 0:
                tl.debug_barrier()
                arrived = tl.atomic_add(arr_ptr + slot + lane, tl.full([LANES], 1, tl.int32), mask=lane == 0,
                                        sem="release")
    return arrived


@triton.jit
def _advance_if_last(arr_ptr, cnt_ptr, fcnt_ptr, slot, arrived, nprog, h, fc, L: tl.constexpr, LANES: tl.constexpr):
    """The last of the row's ``nprog`` programs to arrive (:func:`_arrive`: its count, or lane 0 of ``arrived``
    when ``LANES`` > 0) advances the counters ``h``, ``fc`` it read (:func:`.ring._next_counts`) and resets the
    count. Its acquire exchange synchronises with every program's release (one release sequence on the slot's
    count), so each program's reads of the counters happen before these stores: none reads an advanced count."""
    if arr_ptr is not None:
        if LANES == 0:
            before = arrived
        else:
            before = tl.max(tl.where(tl.arange(0, LANES) == 0, arrived, -1), axis=0)   # (no reply in other lanes)
        if before == nprog - 1:
            tl.atomic_xchg(arr_ptr + slot, 0, sem="acquire")
            h1, fc1 = _next_counts(h, fc, L)
            tl.store(cnt_ptr + slot, h1)
            tl.store(fcnt_ptr + slot, fc1)


@triton.jit
def _decode_step_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
    hp0, hp1, hp2, lp0, lp1, lp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    NV4: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
    CACHED: tl.constexpr, DOTP: tl.constexpr, arr_ptr=None, ARRIVE_LANES: tl.constexpr = 0, scr_ptr=None,
    amx_ptr=None, harr_ptr=None, SPREAD: tl.constexpr = False, HG: tl.constexpr = 1,
):
    """The fused step (every row, flush or not) and conventional decoding: grid ``(cdiv(V, BV), HV, B)``, one
    program per (V-block, head, row) (:func:`_step_program`). The V-block programs of one (row, head) are
    adjacent in launch order, so the ring tiles they share are read from DRAM once (L2 hits for the others).
    ``arr_ptr`` (int32 ``[S + 1]``, ``SSMStateCache.step_arrivals``; None: the counters stay): the step also
    advances the rows' counters (:func:`_arrive`, :func:`_advance_if_last`), saving the second launch.
    ``scr_ptr`` (fp32 ``[B, HV, NVF * BVF, BK]``; nvfp4 two-pass flushes, ``NVF`` > 1, else None): each (row, head)'s
    S_L scratch, so that pass 2 encodes the very S_L whose amax pass 1 took (:func:`_step_program`). ``SPREAD``
    (``StepPlan.nvfp4_spread``): that flush spread over the head's V-block programs, with ``amx_ptr`` (fp32
    ``[B, HV, cdiv(V, BV)]``, one amax per program) and ``harr_ptr`` (int32 ``[B, HV]``, zeros: the head's arrival
    counts, zero again after the step)."""
    pv = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    rh = b.to(tl.int64) * HV + head
    if scr_ptr is not None:
        scr = scr_ptr + rh * (NVF * BVF * BK)
    else:
        scr = None
    amx = None
    harr = None
    if SPREAD:
        amx = amx_ptr + rh * tl.num_programs(0)
        harr = harr_ptr + rh
    _step_program(pv, head, b, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2,
                  rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed, HV, K, V, L, L1, L1P, LP,
                  LPLOG, BK, BV, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR, TAG, CACHED, False,
                  scr, DOTP, arr_ptr=arr_ptr, nprog=tl.num_programs(0) * HV, ARRIVE_LANES=ARRIVE_LANES, amx_ptr=amx,
                  harr_ptr=harr, SPREAD=SPREAD, HG=HG)


def launch_fused(plan, args: dict, consts: dict, batch: int, device, arr_ptr=None, head_arrivals=None) -> None:
    """Launch the fused step for ``batch`` rows: ``args`` the tensors and scalars of :func:`_decode_step_kernel`
    (:func:`.decode.step_args`), ``consts`` the shapes and formats (:func:`.decode.step_consts`), ``plan`` the
    :class:`.launch.StepPlan` (grid ``(cdiv(V, BV), HV, B)``); ``arr_ptr``: the cache's ``step_arrivals`` to also
    advance the rows' counters (None: they stay). A two-pass nvfp4 flush gets its S_L scratch (``B * HV`` heads
    of ``V x BK`` fp32) allocated here, and when spread (``plan.nvfp4_spread``) the programs' amaxes;
    ``head_arrivals`` (spread only: int32 ``[B * HV]``, zeros, :meth:`.SSMStateCache.head_arrivals`) the heads'
    arrival counts, which the step leaves zero."""
    from .launch import _two_pass_nvfp4, launch_options

    grid = (triton.cdiv(consts["V"], plan.block_v), args["HV"], batch)
    NVF = triton.cdiv(consts["V"], plan.flush_block_v)
    scr = amx = harr = None
    if _two_pass_nvfp4(plan.nvfp4, plan.flush_block_v, consts["V"]):
        scr = torch.empty(batch * args["HV"] * NVF * plan.flush_block_v * consts["BK"], dtype=torch.float32,
                          device=device)
    if plan.nvfp4_spread:
        if head_arrivals is None or head_arrivals.numel() != batch * args["HV"]:
            got = None if head_arrivals is None else tuple(head_arrivals.shape)
            raise ValueError(f"a spread nvfp4 flush needs head_arrivals, int32 zeros [{batch * args['HV']}] "
                             f"(SSMStateCache.head_arrivals), got {got}")
        amx = torch.empty(batch * args["HV"] * grid[0], dtype=torch.float32, device=device)
        harr = head_arrivals
    _decode_step_kernel[grid](**args, **consts, BV=plan.block_v, BVF=plan.flush_block_v, NVF=NVF, DOTP=plan.dot,
                              arr_ptr=arr_ptr, ARRIVE_LANES=plan.arrive_lanes, scr_ptr=scr, amx_ptr=amx,
                              harr_ptr=harr, SPREAD=plan.nvfp4_spread,
                              **launch_options(device, plan.num_warps, plan.maxnreg, plan.stages))
