"""The split step's non-flush kernel: one program per (row, head) over all V rows, the read copy in key chunks.

Grid ``(1, HV, B)``: a program streams the read copy in ``BK // KC`` key chunks ``[BVA, KC]``, reduces the ring's
live entries once per (row, head) and stores the outputs and the new correction once; rows that flush this step
(``h + 1 >= L``) are left to :mod:`.flush`. The arithmetic is the fused kernel's (:mod:`.ring`), bit for bit in
the interpreter.
"""

from __future__ import annotations

import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode

from .ring import _append_keys, _append_rows, _current_log_decay, _load_ring_keys, _ring_coeffs
from .rounding import pow2_f32
from .rowscaled import is_rowscaled
from .tiles import (_decay_max, _load_read, _load_step_inputs, _nvfp4_chunk_sums, _read_scales, _read_unscale, _vec4,
                    key_row)


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
def _chunk_factors(q_ptr, k_ptr, g_ptr, gp_ptr, has_prev, bh, bhk, gam, kc, mkc, pq, pk, K: tl.constexpr,
                   GK: tl.constexpr, DELTA: tl.constexpr, XSC: tl.constexpr):
    """K chunk ``kc`` of gamma_{1:t} * q_t and (delta rule) gamma_{1:t} * k_t, fp32 ``[KC]``, from (cache-hit)
    reloads of the inputs in the chunk's layout. GK = 1: ``gam`` is the scalar decay; per-key decays (GK = K):
    the chunk of gamma_{1:t} = exp(G_{h-1} + g_t), G_{h-1} from the ring row at ``gp_ptr`` (0 unless
    ``has_prev``): the fused kernel's whole-row arithmetic, element by element. ``XSC`` (a scaled read: nvfp4 or
    row-scaled): the scaled inputs of :func:`.ring._read_rowdot`, ``(gamma pq) q`` and ``(gamma pk) k``
    (``pq = 2**s_q``, ``pk = 2**s_k``). ``bhk``: the row's key head (:func:`.tiles.key_row`)."""
    q = tl.load(q_ptr + bh * K + kc, mask=mkc, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + bhk * K + kc, mask=mkc, other=0.0).to(tl.float32)
    if GK == 1:
        gamc = gam
    else:
        Gp = tl.load(gp_ptr + kc, mask=mkc & has_prev, other=0.0)
        gamc = tl.exp(Gp + tl.load(g_ptr + bh * K + kc, mask=mkc, other=0.0).to(tl.float32))
    return _product_inputs(gamc, q, k, pq, pk, DELTA, XSC)


@triton.jit
def _product_inputs(gam, q, k, pq, pk, DELTA: tl.constexpr, XSC: tl.constexpr):
    """The inputs of the read-copy products from gamma (a scalar or like ``q``), q and k: ``gamma q`` and (delta
    rule) ``gamma k``; ``XSC`` (a scaled read): scaled as :func:`.ring._read_rowdot` does, ``(gamma pq) q`` and
    ``(gamma pk) k``. Returns ``(xq, xk)`` (``xk = xq`` without the delta rule)."""
    if XSC:
        xq = (gam * pq) * q
        xk = (gam * pk) * k if DELTA else xq
    else:
        xq = gam * q
        xk = gam * k if DELTA else xq
    return xq, xk


@triton.jit
def _add_chunk_rowsums(acc_q, acc_k, S, SB, q_ptr, k_ptr, g_ptr, gp_ptr, has_prev, bh, bhk, gam, kc, mkc, pq, pk,
                       xs_ptr, K: tl.constexpr, BK: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr,
                       NV4R: tl.constexpr, XSC: tl.constexpr, XSCR: tl.constexpr):
    """Add key chunk ``kc`` of the read copy, ``S``, ``SB`` ``[BVA, KC]`` (:func:`.tiles._load_read`), to the row sums:
    ``acc_q += S_c (gamma q)_c`` and (delta rule) ``acc_k += S_c (gamma k)_c`` (``[BVA]`` each; gamma chunks:
    :func:`_chunk_factors`). ``XSC`` (a scaled read, :func:`.ring._read_rowdot`): the inputs carry the whole key row's
    scalings ``pq = 2**s_q``, ``pk = 2**s_k`` and ``S`` the stored values before their scales (the caller unscales
    the totals); ``NV4R`` (nvfp4 read copy): the chunk's block sums with the block scales ``SB``. ``XSCR``: the
    chunk's inputs are loaded from the program's scratch row ``xs_ptr`` (``[2, BK]``: the q and k inputs of the
    whole row, the same values :func:`_chunk_factors` computes). Returns ``(acc_q, acc_k)``."""
    if XSCR:   # the row's inputs were computed once and parked in the program's scratch row (see the kernel)
        xq = tl.load(xs_ptr + kc)
        if DELTA:
            xk = tl.load(xs_ptr + BK + kc)
        else:
            xk = xq
    else:
        xq, xk = _chunk_factors(q_ptr, k_ptr, g_ptr, gp_ptr, has_prev, bh, bhk, gam, kc, mkc, pq, pk, K, GK, DELTA,
                                XSC)
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
    rg_ptr, rk_ptr, rv_ptr, rb_ptr, ru_ptr, cnt_ptr,
    HV, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, L1: tl.constexpr, L1P: tl.constexpr, BK: tl.constexpr,
    BVA: tl.constexpr, KC: tl.constexpr, GK: tl.constexpr, DELTA: tl.constexpr, FMT_LP: tl.constexpr,
    CACHED: tl.constexpr, PREFETCH: tl.constexpr, STAGES: tl.constexpr, xs_ptr=None, E2M1_PTX: tl.constexpr = True,
    HG: tl.constexpr = 1,
):
    """First launch of a split replay step: the non-flush rows (and the padded rows' zero output).

    Grid ``(1, HV, B)``: a program handles one (row, head), all ``V`` rows at once (``BVA`` = next power of two),
    streaming the read copy in ``BK // KC`` key chunks ``[BVA, KC]`` (``KC`` = :func:`.reference.nonflush_kc`):
    the per-chunk row sums stay in the chunk's layout (a reduction within a warp), the ring terms are reduced
    once per (row, head) over the whole ``[L1P, BVA]`` ring tile, and the outputs and corrections are stored
    once; only the ``h`` live ring entries are read. ``STAGES`` = 0: the chunk loop is unrolled, the first chunk
    is loaded before ``h`` is known and with ``PREFETCH`` each next chunk is loaded before the current one is
    reduced; ``STAGES`` > 0: a loop software-pipelined over that many stages (asynchronous copies of the next
    chunks into shared memory; :func:`.launch.plan_nonflush`). Either way the chunks' row sums are added in chunk
    order, as :func:`.ring._read_rowdot` and :func:`.reference._chunked_npsum` add them.
    Per-key decays (kda): each chunk computes its own slice of gamma_{1:t} from the ring's last cumulative log
    decay (:func:`_chunk_factors`).
    ``xs_ptr`` (:class:`.launch.NonflushPlan` ``input_scratch``; else None): the inputs of the chunks' products, ``gamma q`` and ``gamma k``
    (nvfp4 and row-scaled: scaled, :func:`.ring._read_rowdot`), are computed once for the whole key row and stored in the program's
    scratch row ``xs_ptr + (b * HV + head) * 2 * BK`` (fp32 ``[2, BK]``); after a barrier each chunk loads its
    slice. Otherwise every thread recomputes the chunk's inputs for the columns it holds, in every chunk.
    ``E2M1_PTX``: an nvfp4 read copy's E2M1 decode (:func:`.rounding.nvfp4_raw`; the same bits either way).
    ``HG``: value heads per key head (``SSMStateCache.key_group``): k ``[B, HV // HG, K]`` and the ring's keys per
    key head; the first head of a group appends the key (:func:`.tiles.key_row`).
    Flush rows (``h + 1 >= L``) are left to the flush launches."""
    NKC: tl.constexpr = BK // KC
    XSCR: tl.constexpr = xs_ptr is not None
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
    bhk = key_row(b.to(tl.int64), head, HV, HG)
    ring0k = key_row(tl.maximum(slot, 0), head, HV, HG) * L1
    h = tl.load(cnt_ptr + tl.maximum(slot, 0))
    NV4R: tl.constexpr = FMT_LP == fcode.NVFP4
    RSR: tl.constexpr = is_rowscaled(FMT_LP)
    XSC: tl.constexpr = NV4R or RSR   # a scaled read (ring._read_rowdot)
    if STAGES == 0:   # the first chunk before h is known
        S_next, SB_next = _load_read(lp0, lp1, lp2, sh, offs_v, offs_c, mv, offs_c < K, K, V, FMT_LP, KC, 0, E2M1_PTX)
    q, kt, gt, gts, beta = _load_step_inputs(q_ptr, k_ptr, g_ptr, beta_ptr, bh, offs_k, mk, K, BK, GK, DELTA, bhk)
    if slot < 0:
        tl.store(out_ptr + bh * V + offs_v, tl.zeros([BVA], dtype=tl.float32), mask=mv)
    elif h + 1 < L:
        offs_j = tl.arange(0, L1P)
        mj = offs_j < h                     # h <= L - 2: only live entries are read
        ej = ring0 + offs_j
        Ur, vt = _load_ring_rows(ru_ptr, rv_ptr, v_ptr, ej, mj, bh, offs_v, mv, V, DELTA)
        Kr, Gr = _load_ring_keys(rk_ptr, rg_ptr, ej, mj, offs_k, mk, K, GK, ring0k + offs_j)
        gp_ptr = rg_ptr + (ring0 + h - 1) * GK   # kda: G_{h-1}, also reloaded by the chunks for their gamma slice
        if GK == 1:
            Gt, Gts = _current_log_decay(Gr, offs_j, h, gt, gts, GK, BK)
        else:
            Gt = tl.load(gp_ptr + offs_k, mask=mk & (h > 0), other=0.0) + gt
            Gts = 0.0
        cq, ck = _ring_coeffs(Kr, Gr, q, kt, Gt, Gts, GK)
        if DELTA:
            # the delta rule's ring terms now, added after the chunks (same order as _nonflush_rows): the ring tiles
            # are then dead in the chunk loop (no spills under the register cap; mamba2 keeps its ring tile for after
            # the loop, which measured faster there: docs/TUNING.md)
            ring_q = tl.sum(Ur * cq[:, None], 0)
            ring_k = tl.sum(Ur * ck[:, None], 0)
        gam = tl.exp(Gts)   # GK = 1: the checkpoint's decay, a scalar (kda: unused, its chunks compute their slices)
        if GK == 1:   # gamma over the key row (the scratch row's and the nvfp4 scalings' input)
            gam_row = gam
        else:
            gam_row = tl.exp(Gt)
        if XSC:   # the power-of-two scalings of _read_rowdot, from the whole key row of gamma q and gamma k
            sq, sk = _read_scales(gam_row * q, gam_row * kt, _decay_max(gam_row, gam, GK), DELTA)
            pq = pow2_f32(sq)
            pk = pow2_f32(sk)
            if NV4R:
                f = tl.math.div_rn(1.0, tl.load(lp2 + sh))
            else:   # the rows' decode scales
                f = tl.load(lp1 + sh * V + offs_v, mask=mv, other=1.0)
        else:
            pq = 1.0
            pk = 1.0
        if XSCR:   # the chunks' inputs, computed once for the whole key row
            xs = xs_ptr + bh * (2 * BK)
            xq_row, xk_row = _product_inputs(gam_row, q, kt, pq, pk, DELTA, XSC)
            tl.store(xs + offs_k, xq_row)
            if DELTA:
                tl.store(xs + BK + offs_k, xk_row)
            tl.debug_barrier()   # the row is visible to every thread of the program
        else:
            xs = None
        # the chunks' row sums are added in chunk order (acc = ((p0 + p1) + p2) + p3, as _read_rowdot)
        acc_q = tl.zeros([BVA], dtype=tl.float32)
        acc_k = tl.zeros([BVA], dtype=tl.float32)
        if STAGES > 0:   # software-pipelined: the next chunks' loads go to shared memory (cp.async), no registers
            for c in tl.range(0, NKC, num_stages=STAGES):
                kc = c * KC + offs_c
                mkc = kc < K
                S, SB = _load_read(lp0, lp1, lp2, sh, offs_v, kc, mv, mkc, K, V, FMT_LP, KC, c * KC, E2M1_PTX)
                acc_q, acc_k = _add_chunk_rowsums(acc_q, acc_k, S, SB, q_ptr, k_ptr, g_ptr, gp_ptr, h > 0, bh, bhk, gam,
                                                  kc, mkc, pq, pk, xs, K, BK, GK, DELTA, NV4R, XSC, XSCR)
        else:
            for c in tl.static_range(NKC):
                kc = c * KC + offs_c
                mkc = kc < K
                if PREFETCH or c == 0:
                    S = S_next
                    SB = SB_next
                else:
                    S, SB = _load_read(lp0, lp1, lp2, sh, offs_v, kc, mv, mkc, K, V, FMT_LP, KC, c * KC, E2M1_PTX)
                if PREFETCH and c + 1 < NKC:    # the next chunk's loads before this chunk is reduced
                    S_next, SB_next = _load_read(lp0, lp1, lp2, sh, offs_v, kc + KC, mv, kc + KC < K, K, V, FMT_LP,
                                                 KC, (c + 1) * KC, E2M1_PTX)
                acc_q, acc_k = _add_chunk_rowsums(acc_q, acc_k, S, SB, q_ptr, k_ptr, g_ptr, gp_ptr, h > 0, bh, bhk, gam,
                                                  kc, mkc, pq, pk, xs, K, BK, GK, DELTA, NV4R, XSC, XSCR)
        if XSC:
            acc_q = _read_unscale(acc_q, f, sq, 6 if NV4R else 0)
            if DELTA:
                acc_k = _read_unscale(acc_k, f, sk, 6 if NV4R else 0)
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
        _append_keys(rk_ptr, rg_ptr, rb_ptr, eh, kt, Gt, beta, offs_k, mk, True, K, GK, DELTA, CACHED, ring0k + h,
                     head % HG == 0)


def launch_nonflush(plan, args: dict, consts: dict, batch: int, xs, device) -> None:
    """Launch the non-flush rows of a split step (grid ``(1, HV, B)``): ``plan`` the :class:`.launch.NonflushPlan`,
    ``args`` / ``consts`` as :func:`.decode.step_args` / :func:`.decode.step_consts` give them, ``xs`` the scratch
    rows of the chunks' inputs (fp32 ``[B * HV * 2 * BK]``) or None."""
    from .launch import launch_options

    names = ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "idx_ptr", "out_ptr", "lp0", "lp1", "lp2", "rg_ptr",
             "rk_ptr", "rv_ptr", "rb_ptr", "ru_ptr", "cnt_ptr", "HV")
    cnames = ("K", "V", "L", "L1", "L1P", "BK", "GK", "DELTA", "FMT_LP", "CACHED", "HG")
    _nonflush_kernel[(1, args["HV"], batch)](
        **{n: args[n] for n in names}, **{n: consts[n] for n in cnames}, BVA=plan.rows, KC=plan.key_chunk,
        PREFETCH=plan.prefetch, STAGES=plan.stages, xs_ptr=xs, E2M1_PTX=plan.e2m1_ptx,
        **launch_options(device, plan.num_warps, plan.maxnreg))
