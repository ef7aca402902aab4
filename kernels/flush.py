"""The split step's flush launches: list the rows that flush, then flush them on a persistent grid.

:func:`_flush_rows_kernel` (one program) lists the rows whose slot flushes this step; :func:`_flush_kernel`, a grid
of a few programs per SM, loops over the work items (flush row, head, V-block) and runs each as the fused grid's
program (:func:`.fused._step_program`, ``FLUSH_ONLY``). On the L - 1 of L steps where nothing flushes the list is
empty and the launch is a few microseconds. nvfp4 checkpoints with few flush rows: :mod:`.nvfp4_items`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .flush_math import _flush_row_flags
from .fused import _step_program
from .nvfp4_items import _nvfp4_commit_item, _nvfp4_item_layout

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
    CACHED: tl.constexpr, scr, DOTP: tl.constexpr, UROWS: tl.constexpr = 0, SCR_L2: tl.constexpr = False,
    HG: tl.constexpr = 1,
):
    """Work item ``w`` of the flush launch, ``IPH`` items of ``BVI`` rows of V per (flush row, head): the
    ``w % IPH``-th V-block of head ``(w / IPH) % HV`` of the ``w / (HV IPH)``-th listed flush row."""
    b = tl.load(rows_ptr + w // (HV * IPH))
    _step_program(w % IPH, (w // IPH) % HV, b, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
                  lp0, lp1, lp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed, HV, K, V, L, L1, L1P,
                  LP, LPLOG, BK, BVI, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR, TAG, CACHED, True, scr,
                  DOTP, UROWS, SCR_L2, HG=HG)


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
    CACHED: tl.constexpr, NVB: tl.constexpr, DOTP: tl.constexpr, scr_ptr=None, amx_ptr=None, NVG: tl.constexpr = 0,
    UROWS: tl.constexpr = 0, SCR_L2: tl.constexpr = False, HG: tl.constexpr = 1,
):
    """Split step, flush launch (FLUSH_ONLY): a persistent grid of a few programs per SM loops over the work
    items (flush row, head, V-block) of the rows listed by :func:`_flush_rows_kernel`, each handled like the
    fused grid's program (``NVB`` V-blocks per head; 1 for an nvfp4 checkpoint, whose flush needs the whole
    head's amax: the item is the fused grid's ``pv == 0`` program, which flushes the whole head). On the L - 1
    of L steps where a slot group does not flush the list is empty and the launch is a few microseconds (a full
    grid of programs that read their row's ring count and exit was far slower: docs/TUNING.md). ``scr_ptr`` (nvfp4 two-pass flushes; else None): fp32 ``[programs, NVF * BVF, BK]``,
    each program's S_L scratch (:func:`.fused._step_program`).

    Few flush rows (slots whose ring positions are spread, as in serving: about B / L rows flush per step) would
    leave most of the grid idle while each item's program walks its ``BV // BVF`` sub-blocks one after another.
    So (not nvfp4) when the whole-head items would fill at most half of the programs, the items are ``FBV`` rows:
    single ``BVF``-row sub-blocks of 32 rows or more, pairs of 16-row ones (a single 16-row sub-block made the
    compiler spill: docs/TUNING.md). Each recomputes the per-(row, head) flush terms (the same values, so the same
    results).

    ``amx_ptr`` (nvfp4 sub-block items, :class:`.launch.FlushPlan` ``nvfp4_items``; else None): with few flush rows
    (the same test) the previous launch, :func:`.nvfp4_items._nvfp4_part_kernel`, has done pass 1 of the flushing
    heads in items of one or more ``BVF``-row sub-blocks (S_L into scratch, their amax into ``amx_ptr``); this
    launch runs pass 2, one sub-block per item (:func:`.nvfp4_items._nvfp4_commit_item`). ``NVG``: the plan's
    sub-blocks per pass-1 item (0: as many as keep pass 1 within one wave, :func:`.nvfp4_items._nvfp4_item_layout`).
    ``UROWS`` (:class:`.launch.FlushPlan` ``corrections_rows``; 0: off): a two-pass nvfp4 flush of a separate
    delta-rule spec computes the head's corrections first, ``UROWS`` rows at a time, and its sub-blocks reload them
    (:func:`.flush_math._head_corrections_first`). ``SCR_L2`` (:class:`.launch.FlushPlan` ``scratch_l2``): L2
    eviction hints on the whole-head items' scratch (:func:`.fused._step_program`)."""
    NV4ITEMS: tl.constexpr = amx_ptr is not None
    FBV: tl.constexpr = BVF if BVF >= 32 else 2 * BVF   # rows of a small item (above)
    SMALL: tl.constexpr = (not NV4) and BV > FBV
    n = tl.load(nrows_ptr) * (HV * NVB)
    small = 2 * n <= tl.num_programs(0)
    if NV4ITEMS:
        if small:
            n = 0
            nh, G, ng = _nvfp4_item_layout(tl.load(nrows_ptr), HV, NVF, NVG)
            w = tl.program_id(0)
            while w < nh * NVF:
                _nvfp4_commit_item(w, ng, rows_ptr, q_ptr, idx_ptr, out_ptr, hp0, hp1, hp2, lp0, lp1, lp2, fcnt_ptr,
                                   scr_ptr, amx_ptr, seed, HV, K, V, BK, BVF, NVF, FMT_HP, FMT_LP, SHARED, SR, TAG)
                w += tl.num_programs(0)
    if SMALL:
        if small:
            n *= BV // FBV
    w = tl.program_id(0)
    if scr_ptr is not None:
        scr = scr_ptr + w.to(tl.int64) * (NVF * BVF * BK)
    else:
        scr = None
    if (not SMALL) or (not small):
        while w < n:   # (a range() with a loaded bound fails in the Triton 3.6 interpreter)
            _flush_item(w, NVB, BV, rows_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr, hp0, hp1, hp2,
                        lp0, lp1, lp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed, HV, K, V, L, L1,
                        L1P, LP, LPLOG, BK, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR, TAG, CACHED, scr,
                        DOTP, UROWS, SCR_L2, HG)
            w += tl.num_programs(0)
    else:
        while w < n:
            _flush_item(w, NVB * (BV // FBV), FBV, rows_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, idx_ptr, out_ptr,
                        hp0, hp1, hp2, lp0, lp1, lp2, rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr, fcnt_ptr, seed,
                        HV, K, V, L, L1, L1P, LP, LPLOG, BK, BVF, NVF, NV4, GK, DELTA, FMT_HP, FMT_LP, SHARED, SR,
                        TAG, CACHED, scr, DOTP, HG=HG)
            w += tl.num_programs(0)


def launch_flush(plan, args: dict, consts: dict, batch: int, nprog: int, scratch: dict, device) -> None:
    """Launch the flush rows of a split step: list them (:func:`_flush_rows_kernel`, or for nvfp4 sub-block items
    :func:`.nvfp4_items._nvfp4_part_kernel`, which also runs pass 1), then flush them on the persistent grid of
    ``nprog`` programs (:func:`_flush_kernel`). ``plan``: the :class:`.launch.FlushPlan`; ``consts``: the flush
    launch's (:func:`.decode.step_consts` with the flush tiles); ``scratch``: the step's ``rows`` (int32 ``[B]``),
    ``nrows`` (int32 ``[1]``), ``scr`` (fp32 ``[nprog * NVF * BVF * BK]`` or None) and ``amx`` (fp32
    ``[nprog * NVF]`` or None) tensors."""
    from .launch import launch_options
    from .nvfp4_items import _nvfp4_part_kernel

    opts = launch_options(device, plan.num_warps, plan.maxnreg, plan.stages)
    block = min(1024, triton.next_power_of_2(batch))
    rows, nrows, scr, amx = scratch["rows"], scratch["nrows"], scratch["scr"], scratch["amx"]
    if plan.nvfp4_items:   # lists the flush rows; few of them: pass 1 of their nvfp4 heads in sub-block items
        item_consts = dict(consts, DOTP=plan.items_dot)
        _nvfp4_part_kernel[(nprog,)](rows_ptr=rows, nrows_ptr=nrows, B=batch, **args, **item_consts, scr_ptr=scr,
                                     amx_ptr=amx, NVG=plan.nvfp4_item_blocks, BLOCK=block,
                                     **launch_options(device, plan.items_warps, plan.items_maxnreg, plan.stages))
    else:
        _flush_rows_kernel[(1,)](idx_ptr=args["idx_ptr"], cnt_ptr=args["cnt_ptr"], rows_ptr=rows, nrows_ptr=nrows,
                                 B=batch, L=consts["L"], BLOCK=block)
    nvb = 1 if consts["NV4"] else triton.cdiv(consts["V"], plan.item_rows)
    _flush_kernel[(nprog,)](rows_ptr=rows, nrows_ptr=nrows, **args, **consts, NVB=nvb, scr_ptr=scr, amx_ptr=amx,
                            NVG=plan.nvfp4_item_blocks, UROWS=plan.corrections_rows, SCR_L2=plan.scratch_l2, **opts)
