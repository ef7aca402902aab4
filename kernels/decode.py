"""The decode-step launcher: conventional, replay (Algorithm 1) and dual (Algorithm 3) on the cache's tensors.

One step of ``B`` rows runs, as :func:`.launch.plan_step` decides, either

* the **fused** grid (:mod:`.fused`: one program per (V-block, head, row), non-flush and flush rows alike; small
  grids and conventional decoding, where every step is a flush), or
* the **split** step: the non-flush rows (:mod:`.nonflush`, one program per (row, head)) on the caller's stream,
  and the flush rows (:mod:`.flush`: listed on the device, then flushed by a persistent grid; nvfp4 checkpoints
  with few flush rows in sub-block items, :mod:`.nvfp4_items`) on a side stream that forks from the caller's at
  the start of the step and joins it at the end. The two touch disjoint slots (the rows of one step have
  distinct slots, and a row is either flushing, ``h + 1 >= L``, or not).

With ``advance``, the step then moves the ring and flush counters: in a small fused grid the last program of each
row does it (``StepPlan.step_advance``, :func:`.fused._advance_if_last`, no second launch), else :func:`triton_advance`
(a second small launch; a split step's flush launch lists its rows from the counts while the non-flush launch runs,
so neither launch may advance them). No host sync, CUDA-graph capturable. The arithmetic (device functions of
:mod:`.tiles`, :mod:`.ring`, :mod:`.flush_math`) follows the torch reference :mod:`.reference` operation for
operation; the format codes are :mod:`replayssm_quant.quant.format_codes`.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from replayssm_quant.quant.format_codes import FORMAT_CODE

from .flush import launch_flush
from .fused import launch_fused
from .launch import StepPlan, plan_step
from .nonflush import launch_nonflush
from .reference import block_k, cached_corrections, flush_entries
from .ring import _next_counts


def step_args(cache, slot_idx, q, k, v, g, beta, out) -> dict:
    """The tensors and scalars of a step's kernels, by parameter name (None for a tensor a spec does not keep:
    the nvfp4 parts of other formats, beta and the raw-input ring of a shared delta-rule spec, beta of mamba2)."""
    cached = cached_corrections(cache)
    hp, lp = cache.hp.kernel_tensors(), cache.lp.kernel_tensors()
    return dict(q_ptr=q, k_ptr=k, v_ptr=v, g_ptr=g, beta_ptr=beta if cache.delta else None, idx_ptr=slot_idx,
                out_ptr=out, hp0=hp[0], hp1=hp[1], hp2=hp[2], lp0=lp[0], lp1=lp[1], lp2=lp[2],
                rg_ptr=cache.ring_g, rk_ptr=cache.ring_k, rv_ptr=None if cached else cache.ring_v,
                rb_ptr=cache.ring_beta if cache.delta and not cached else None, ru_ptr=cache.ring_u,
                cnt_ptr=cache.ring_count, fcnt_ptr=cache.flush_count, seed=cache.seed, HV=cache.num_heads)


def step_consts(cache, plan: StepPlan) -> dict:
    """The constexprs every step kernel shares: shapes, window, formats, family (the tiles are the launchers')."""
    L1 = cache.ring_k.shape[2]
    LP = flush_entries(cache.window)
    return dict(K=cache.head_k, V=cache.head_v, L=cache.window, L1=L1, L1P=max(2, triton.next_power_of_2(L1)),
                LP=LP, LPLOG=LP.bit_length() - 1, BK=block_k(cache.head_k), NV4=plan.nvfp4,
                GK=cache.head_k if cache.per_key else 1, DELTA=cache.delta,
                FMT_HP=FORMAT_CODE[cache.spec.recur.name], FMT_LP=FORMAT_CODE[cache.spec.read.name],
                SHARED=cache.spec.shared, SR=cache.spec.sr, TAG=cache.tag, CACHED=cached_corrections(cache),
                HG=cache.key_group)


def flush_side_stream(cache, device):
    """The side stream of a split step's flush launches, one per cache and device (None off the GPU or with the
    ``flush_stream`` knob 0)."""
    if device.type != "cuda" or not cache.knobs.flush_stream:
        return None
    streams = cache.__dict__.setdefault("_flush_streams", {})
    if device.index not in streams:
        streams[device.index] = torch.cuda.Stream(device)
    return streams[device.index]


def _split_step(cache, plan: StepPlan, args: dict, consts: dict, batch: int, device) -> None:
    """The split step's launches (all before the counter advance, so they read the same ring counts)."""
    from .launch import _num_sms

    fplan = plan.flush
    side = flush_side_stream(cache, device) if fplan.side_stream else None
    if side is not None:
        main = torch.cuda.current_stream(device)
        side.wait_stream(main)
    # every scratch tensor is allocated before the first launch and kept until the join (a block freed on the
    # caller's stream between the launches could otherwise be handed to another tensor while a side-stream kernel
    # still uses it)
    V, BK, BVF = cache.head_v, consts["BK"], fplan.sub_block_rows
    NVF = triton.cdiv(V, BVF)
    nvb = 1 if plan.nvfp4 else triton.cdiv(V, fplan.item_rows)
    nprog = min(batch * cache.num_heads * nvb, fplan.programs_per_sm * _num_sms(device))
    f32 = dict(dtype=torch.float32, device=device)
    scratch = dict(rows=torch.empty(batch, dtype=torch.int32, device=device),
                   nrows=torch.empty(1, dtype=torch.int32, device=device),
                   scr=torch.empty(nprog * NVF * BVF * BK, **f32) if fplan.scratch else None,
                   amx=torch.empty(nprog * NVF, **f32) if fplan.nvfp4_items else None)
    xs = torch.empty(batch * cache.num_heads * 2 * BK, **f32) if plan.nonflush.input_scratch else None
    launch_nonflush(plan.nonflush, args, consts, batch, xs, device)
    fconsts = dict(consts, BV=fplan.item_rows, BVF=BVF, NVF=NVF, DOTP=fplan.dot)
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        launch_flush(fplan, args, fconsts, batch, nprog, scratch, device)
    if side is not None:
        for t in scratch.values():   # allocated on the caller's stream, used on the side stream
            if t is not None:
                t.record_stream(side)
        main.wait_stream(side)


def step_plan_consts(cache, batch: int) -> tuple[StepPlan, dict]:
    """:func:`.launch.plan_step` and :func:`step_consts` of ``batch`` rows, computed once per cache and batch size
    and knobs (a cache's family, spec, window, sizes and device do not change; plans are frozen dataclasses)."""
    memo = cache.__dict__.setdefault("_step_plans", {})
    key = (batch, cache.knobs)
    pc = memo.get(key)
    if pc is None:
        plan = plan_step(cache, batch)
        pc = memo[key] = (plan, step_consts(cache, plan))
    return pc


def triton_step(cache, slot_idx, q, k, v, g, beta, out=None, advance: bool = False):
    """Launch one decode step on the cache's tensors (inputs already validated); with ``advance`` also move the
    rows' ring and flush counters (``SSMStateCache.step``; the speculative commit sets them itself).

    Args:
        slot_idx: int32/int64 ``[B]``; q: ``[B, HV, K]``; k: ``[B, HK, K]`` (``HK = HV / cache.key_group`` key
        heads); v: ``[B, HV, V]`` (fp32/bf16/fp16, contiguous);
        g: log decays ``[B, HV]`` (kda ``[B, HV, K]``); beta: ``[B, HV]`` (any float; None or unused for mamba2);
        out: optional float32 ``[B, HV, V]`` to write into.

    Returns:
        float32 ``[B, HV, V]``.
    """
    B, HV, V = v.shape
    if out is None:
        out = torch.empty(B, HV, V, dtype=torch.float32, device=v.device)
    if B == 0:
        return out
    plan, consts = step_plan_consts(cache, B)
    args = step_args(cache, slot_idx, q, k, v, g, beta, out)
    if plan.split:
        _split_step(cache, plan, args, consts, B, v.device)
    else:
        launch_fused(plan, args, consts, B, v.device,
                     arr_ptr=cache.step_arrivals if advance and plan.step_advance else None,
                     head_arrivals=cache.head_arrivals(B) if plan.nvfp4_spread else None)
    if advance and not plan.step_advance:   # (never set on a split step)
        triton_advance(cache, slot_idx)
    return out


@triton.jit
def _advance_kernel(idx_ptr, cnt_ptr, fcnt_ptr, B, L: tl.constexpr, BLOCK: tl.constexpr):
    """Per row with slot >= 0: ring count h -> h + 1, or 0 and flush count + 1 when h + 1 == L."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < B
    slot = tl.load(idx_ptr + offs, mask=m, other=-1).to(tl.int64)
    ok = m & (slot >= 0)
    h, fc = _next_counts(tl.load(cnt_ptr + slot, mask=ok, other=0), tl.load(fcnt_ptr + slot, mask=ok, other=0), L)
    tl.store(cnt_ptr + slot, h, mask=ok)
    tl.store(fcnt_ptr + slot, fc, mask=ok)


def triton_advance(cache, slot_idx) -> None:
    """Advance the ring and flush counters of the rows' slots ``slot_idx`` (int ``[B]``; one launch, no host
    sync)."""
    B = slot_idx.numel()
    if B == 0:
        return
    BLOCK = min(1024, triton.next_power_of_2(B))
    _advance_kernel[(triton.cdiv(B, BLOCK),)](idx_ptr=slot_idx, cnt_ptr=cache.ring_count, fcnt_ptr=cache.flush_count,
                                              B=B, L=cache.window, BLOCK=BLOCK)
