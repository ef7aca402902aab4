"""nvfp4 flush sub-block items: the two-pass nvfp4 flush of few flush rows spread over the persistent grid.

An nvfp4 flush needs the whole head's amax before it encodes any element, so a whole-head work item walks the head's
sub-blocks twice. When few rows flush (the (row, head) pairs fill at most half of the grid), pass 1 (S_L of a group
of sub-blocks into the (row, head)'s fp32 scratch, and its amax; as many sub-blocks per item as keep the items
within one wave of the grid, :func:`_nvfp4_item_layout`) runs as items of their own in :func:`_nvfp4_part_kernel`,
which also lists the flush rows, and pass 2 (:func:`_nvfp4_commit_item`, one sub-block per item: the head's scale
from the items' amaxes, encode) in :func:`.flush._flush_kernel`. Bit-identical to whole-head items.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .flush_math import _commit_flush_rows, _flush_prep, _flush_row_flags, _flush_S
from .rounding import nvfp4_amax, nvfp4_encode_scale
from .tiles import _load_step_inputs, _store_head_scale, key_row

@triton.jit
def _nvfp4_item_layout(nrows, HV, NVF: tl.constexpr, NVG: tl.constexpr):
    """The sub-block items of ``nrows`` flush rows (:func:`_nvfp4_part_kernel`, and pass 2 in
    :func:`.flush._flush_kernel`): ``(nh, G, ng)``. ``nh``: the (flush row, head) pairs, ``nrows * HV`` when they
    would fill at most half of the grid (the small-items test of :func:`.flush._flush_kernel`), else 0 (whole-head
    items). ``G``: sub-blocks per pass-1 item, ``NVG`` when > 0, else the fewest (a power of two) that keep the
    pass-1 items within one wave of the grid: each item rebuilds its pair's flush terms (:func:`.flush_math._flush_prep`,
    kda's per-key-decay terms above all), so a second wave of items costs more than a longer item. ``ng``:
    pass-1 items per pair, ``cdiv(NVF, G)`` (pass 2 has ``NVF``)."""
    nh = nrows * HV
    nh = tl.where(2 * nh <= tl.num_programs(0), nh, 0)
    if NVG > 0:
        G = nh * 0 + NVG
    else:
        G = nh * 0 + 1
        while (G < NVF) & (nh * ((NVF + G - 1) // G) > tl.num_programs(0)):
            G = G * 2
    return nh, G, (NVF + G - 1) // G


@triton.jit
def _part_sub_block(j, TAIL: tl.constexpr, scr, hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt,
                    beta, Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl, offs_k, mk, K: tl.constexpr, V: tl.constexpr,
                    L: tl.constexpr, LP: tl.constexpr, DELTA: tl.constexpr, FMT_HP: tl.constexpr, BK: tl.constexpr,
                    BVF: tl.constexpr, NVF: tl.constexpr, CACHED: tl.constexpr, DOTP: tl.constexpr):
    """Sub-block ``j`` of a pass-1 item: S_L of its ``BVF`` rows into the pair's scratch ``scr`` (``[NVF * BVF, BK]``
    fp32); returns their amax. ``TAIL``: ``j`` may lie past the head's ``NVF`` sub-blocks (its rows are all masked,
    S_L = 0, and must not be stored: the next pair's scratch follows)."""
    offs_f = j * BVF + tl.arange(0, BVF)
    S = _flush_S(hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh, bh, ring0, at, kt, beta, Kd, Kdl, Kd2, Kd2l, dL, T,
                 br, kdl, cl, offs_f, offs_f < V, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK, CACHED, 0, DOTP=DOTP)
    if TAIL:
        tl.store(scr + offs_f[:, None] * BK + offs_k[None, :], S, mask=(offs_f < NVF * BVF)[:, None])
    else:
        tl.store(scr + offs_f[:, None] * BK + offs_k[None, :], S)
    return nvfp4_amax(S)


@triton.jit
def _nvfp4_part_item(
    w, b, G, ng,
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr,
    LP: tl.constexpr, LPLOG: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    GK: tl.constexpr, DELTA: tl.constexpr, FMT_HP: tl.constexpr, CACHED: tl.constexpr, scr_ptr, amx_ptr,
    DOTP: tl.constexpr, NVG: tl.constexpr, HG: tl.constexpr = 1,
):
    """Few flush rows, nvfp4 checkpoint: pass 1 of the two-pass flush spread over the grid
    (:func:`_nvfp4_part_kernel`). Item ``w`` (:func:`_nvfp4_item_layout`: ``G`` sub-blocks per item, ``ng`` items
    per pair) is the ``w % ng``-th group of ``G`` ``BVF``-row sub-blocks (the last group may be shorter) of (listed
    flush row ``b``, head) ``rh = w / ng``: it builds the per-(row, head) flush terms (the same values in every item
    of a head), S_L of its rows (as the whole-head pass 1 of :func:`.fused._step_program`; ``NVG`` > 0: the fixed
    ``G``, unrolled), and stores them in the (row, head)'s scratch ``scr_ptr[rh]`` (``[NVF * BVF, BK]`` fp32) and
    their amax in ``amx_ptr[w]``; :func:`_nvfp4_commit_item` encodes them."""
    offs_k = tl.arange(0, BK)
    mk = offs_k < K
    rh = w // ng
    head = rh % HV
    bh = b.to(tl.int64) * HV + head
    slot = tl.load(idx_ptr + b).to(tl.int64)     # (listed rows have a slot)
    sh = slot * HV + head
    ring0 = sh * L1
    q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K, BK, GK, DELTA,
                                             key_row(b.to(tl.int64), head, HV, HG))
    Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl = _flush_prep(rg_ptr, rk_ptr, rb_ptr, ring0, kt, gt, gts, beta,
                                                         offs_k, mk, K, L, LP, GK, DELTA, BK, LPLOG, CACHED, DOTP,
                                                         key_row(slot, head, HV, HG) * L1)
    scr = scr_ptr + rh.to(tl.int64) * (NVF * BVF * BK)
    at = tl.exp(gt)
    j = (w % ng) * G
    amax = 0.0
    if NVG > 0:
        # fixed G = NVG: unrolled, no branch (the loads of every sub-block can be issued early); with NVG > 1 the
        # last item of a head may run past it (TAIL)
        for i in tl.static_range(NVG):
            amax = tl.maximum(amax, _part_sub_block(j + i, NVG > 1, scr, hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr,
                                                    sh, bh, ring0, at, kt, beta, Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl,
                                                    cl, offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK, BVF, NVF, CACHED,
                                                    DOTP))
    else:
        end = tl.minimum(j + G, NVF)
        while j < end:   # (a range() with a runtime bound fails in the Triton 3.6 interpreter)
            amax = tl.maximum(amax, _part_sub_block(j, False, scr, hp0, hp1, hp2, v_ptr, rv_ptr, ru_ptr, out_ptr, sh,
                                                    bh, ring0, at, kt, beta, Kd, Kdl, Kd2, Kd2l, dL, T, br, kdl, cl,
                                                    offs_k, mk, K, V, L, LP, DELTA, FMT_HP, BK, BVF, NVF, CACHED,
                                                    DOTP))
            j += 1
    tl.store(amx_ptr + w, amax)


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
    CACHED: tl.constexpr, scr_ptr, amx_ptr, DOTP: tl.constexpr, NVG: tl.constexpr, BLOCK: tl.constexpr,
    HG: tl.constexpr = 1,
):
    """Split step, nvfp4 checkpoint, in place of :func:`.flush._flush_rows_kernel`: every program lists the rows that flush
    this step (program 0 stores the list, ``rows[0:n]``, ``nrows[0] = n``, for :func:`.flush._flush_kernel`), and when few
    rows flush (the (row, head) pairs fill at most half of the grid, the small-items test of :func:`.flush._flush_kernel`:
    same grid) runs pass 1 of their flush in sub-block items (:func:`_nvfp4_part_item`), each finding
    its row in the list again; :func:`.flush._flush_kernel` then runs pass 2. A launch of its own because pass 1
    inside :func:`.flush._flush_kernel` made the whole-head path spill (docs/TUNING.md); with the listing inside,
    the step has no more launches than with whole-head items."""
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
    nh, G, ng = _nvfp4_item_layout(n, HV, NVF, NVG)
    w = pid
    while w < nh * ng:
        i = w // (ng * HV)   # the item's place in the list -> its row (a scan per item: the list program 0
        # writes is not visible to the other programs of this launch)
        b = 0
        c = 0
        start = 0
        while start < B:
            offs, fl = _flush_row_flags(idx_ptr, cnt_ptr, start, B, L, BLOCK)
            b += tl.sum(tl.where((fl > 0) & (c + tl.cumsum(fl, 0) == i + 1), offs, 0), 0)
            c += tl.sum(fl, 0)
            start += BLOCK
        if NVG == 0:
            if G == 1:   # one sub-block per item: the unrolled item (a runtime loop of one is slower on the GPU)
                _nvfp4_part_item(w, b, G, ng, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1,
                                 hp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, HV, K, V, L, L1, LP, LPLOG, BK, BVF,
                                 NVF, GK, DELTA, FMT_HP, CACHED, scr_ptr, amx_ptr, DOTP, 1, HG)
            else:
                _nvfp4_part_item(w, b, G, ng, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1,
                                 hp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, HV, K, V, L, L1, LP, LPLOG, BK, BVF,
                                 NVF, GK, DELTA, FMT_HP, CACHED, scr_ptr, amx_ptr, DOTP, 0, HG)
        else:
            _nvfp4_part_item(w, b, G, ng, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
                             rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, HV, K, V, L, L1, LP, LPLOG, BK, BVF, NVF, GK,
                             DELTA, FMT_HP, CACHED, scr_ptr, amx_ptr, DOTP, NVG, HG)
        w += tl.num_programs(0)


@triton.jit
def _nvfp4_commit_item(
    w, ng, rows_ptr, q_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2, fcnt_ptr, scr_ptr, amx_ptr,
    seed, HV, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr, NVF: tl.constexpr,
    FMT_HP: tl.constexpr, FMT_LP: tl.constexpr, SHARED: tl.constexpr, SR: tl.constexpr, TAG: tl.constexpr,
):
    """Pass 2 of the few-flush-rows nvfp4 flush (:func:`.flush._flush_kernel` with ``amx_ptr``, after
    :func:`_nvfp4_part_kernel`), item ``w`` = the ``w % NVF``-th ``BVF``-row sub-block of (listed flush row, head)
    ``w / NVF``: the head's encode scale from the amaxes of its ``ng`` pass-1 items, then the sub-block's S_L
    rows from the scratch -> outputs and both casts (:func:`.flush_math._commit_flush_rows`); sub-block 0 stores the head's
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
    amax = 0.0   # (a max: the same value in any grouping and order of the sub-blocks)
    i = 0
    while i < ng:
        amax = tl.maximum(amax, tl.load(amx_ptr + rh * ng + i))
        i += 1
    s_enc = nvfp4_encode_scale(amax)
    offs_f = r * BVF + tl.arange(0, BVF)
    S = tl.load(scr_ptr + rh.to(tl.int64) * (NVF * BVF * BK) + offs_f[:, None] * BK + offs_k[None, :])
    q = tl.load(q_ptr + bh * K + offs_k, mask=mk, other=0.0).to(tl.float32)
    _commit_flush_rows(S, q, out_ptr, bh, hp0, hp1, hp2, lp0, lp1, lp2, sh, offs_f, offs_k, offs_f < V, mk, K, V,
                       seed, tl.load(fcnt_ptr + slot), s_enc, FMT_HP, FMT_LP, SHARED, SR, TAG, BK)
    if r == 0:
        _store_head_scale(hp2, lp2, sh, s_enc, FMT_HP, FMT_LP)
