"""Decode-kernel benchmark (DESIGN.md sec. 7): time per step, bytes, bandwidth, speedups, memory.

Run on a GPU with ``replayssm-quant bench --out DIR`` or ``python3 scripts/gpu/bench.py --out DIR``.
Per (family, spec, mode, batch) it builds an :class:`SSMStateCache` with ``R`` groups of
``batch`` slots, ``R`` chosen so the groups' checkpoints together exceed 4x the L2
cache, and captures one CUDA graph of ``L`` rounds x ``R`` groups of decode steps
(each group sees exactly one flush; between two steps of one group all other
groups' states stream through L2, as the other layers would). Per-step time =
median of ``triton.testing.do_bench`` over graph replays / (``L * R``). Minimum
bytes per step = state bytes only (:meth:`StateSpec.step_bytes_per_element`);
ring and activation bytes are extra and not counted. The device copy bandwidth
(bytes read + written by a large ``copy_``) is measured in the same run. fla's
``fused_recurrent_gated_delta_rule`` (GVA, fp32 state) and ``fused_recurrent_kda`` are the outside GDN and KDA
anchors when importable (:data:`FLA_ANCHORS`; Mamba-2 has no fla decode kernel: its outside anchor is mamba_ssm's
Triton ``selective_state_update``, loaded from its source with ``--mamba-ssm-src``, :mod:`.mamba_ssm_anchor`, beside
our conventional fp32 kernel). Correctness on the device: fp32 replay/conventional outputs and checkpoints against
the float64 oracle (the fp32 tl.dots of the replay flush use input_precision="ieee": no TF32; the nvfp4/fp16
check also runs the split flush's 3xTF32 dots). Replay rows also report the time of a non-flush step alone
(``nonflush_us``) and the flush step alone (``flush_us``: every slot's ring count set to L - 1 first). The
main replay time (``time_us``) starts every slot of a group at the same ring position, so a group's flushes
all fall on one of the L steps; ``staggered_us`` spreads the positions (:func:`stagger_slots`: B / L rows
flush on every step, as in serving, where sequences join at different steps). Both carry one flush per slot
per L steps, and both are reported with their ratios; after each, the counters must say that every step ran
(``rounds_ok``: :func:`whole_rounds_ok`; a failing row is named in the report's notes).

Writes ``results.csv``, ``memory.csv``, ``correctness.csv``, ``report.md`` and
``bench.png`` under ``--out`` (plus ``sweep.csv`` with ``--sweep-block-v``: replay times over V-block
sizes with and without the launcher's register cap, each fused and split: the replay step as one kernel, or
as separate launches, non-flush rows then flush rows). ``split_flush`` (``--split-flush auto|on|off``) sets the
launcher's split for the main table; the rows record the one used.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import sys
import time

import torch

from .bench_checks import correctness
from .bench_report import (FLA_MODE, L2_BYTES, MAMBA_SSM_MODE, _versions, add_ratios, configs, markdown_table,
                           memory_table, shape_key_group, shape_key_heads, write_report)
from .inputs import random_decode_inputs, share_keys
from .launch import LaunchKnobs, plan_step
from .state_cache import SSMStateCache

SHAPES = {  # one layer per sequence (DESIGN.md sec. 7)
    "gdn": dict(num_heads=32, num_key_heads=16, head_k=128, head_v=128,
                note="Qwen3.5-4B: HV=32 value heads (16 key heads), K=V=128"),
    "mamba2": dict(num_heads=128, num_key_heads=8, head_k=128, head_v=64,
                   note="Nemotron-H: 128 heads, headdim 64, dstate 128, 8 groups"),
    "kda": dict(num_heads=32, num_key_heads=32, head_k=128, head_v=128, note="Kimi-Linear: 32 heads, K=V=128"),
}
SPECS = ["fp32", "fp16", "fp8+sr", "int8+sr", "nvfp4+sr", "nvfp4/fp16", "nvfp4/fp8+sr", "nvfp4/int8+sr"]
BATCHES = [1, 16, 64, 256, 512]
CPU_SMOKE_SHAPES = {f: dict(num_heads=2, num_key_heads=2 if f == "kda" else 1, head_k=32, head_v=16, note="cpu smoke")
                    for f in SHAPES}


# ------------------------------------------------------------------------------- timing
class Timer:
    """CUDA: capture ``fn`` in a CUDA graph and return the do_bench median (ms) of a replay.
    CPU (smoke mode only): wall time of one call."""

    def __init__(self, device, rep_ms: int):
        self.device, self.rep_ms = device, rep_ms

    def __call__(self, fn) -> float:
        if self.device.type != "cuda":
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        import triton.testing

        fn()                                   # compile / autotune outside the graph
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        ms = triton.testing.do_bench(graph.replay, warmup=max(5, self.rep_ms // 5), rep=self.rep_ms,
                                     return_mode="median")
        del graph
        return ms


def copy_bandwidth(device, timer: Timer, nbytes: int) -> dict:
    """Device copy bandwidth in GB/s, counting bytes read + written (``2 * nbytes`` per copy).

    Two SM-driven copies of an ``nbytes`` buffer (>= 1 GiB on the GPU, far beyond L2), each timed as
    the median of ``triton.testing.do_bench`` without a CUDA graph (a graph turns ``copy_`` into a
    memcpy node, which may run on the copy engines at a lower rate): ``dst.copy_(src)`` and the
    elementwise kernel ``torch.mul(src, 1, out=dst)``. Returns ``{"copy": .., "elementwise": ..,
    "best": max}`` in GB/s; ``best`` is the reference for the bandwidth fractions.
    """
    n = nbytes // 4
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    res = {}
    for name, fn in (("copy", lambda: dst.copy_(src)), ("elementwise", lambda: torch.mul(src, 1.0, out=dst))):
        if device.type == "cuda":
            import triton.testing
            fn()
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(fn, warmup=25, rep=max(100, timer.rep_ms), return_mode="median")
        else:
            ms = timer(fn)
        res[name] = 2 * nbytes / (ms * 1e-3) / 1e9
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    res["best"] = max(res["copy"], res["elementwise"])
    return res


# ------------------------------------------------------------------------------- one measurement
def _fill_states(cache, gen_seed: int, chunk: int = 64):
    n = cache.num_slots
    for s0 in range(0, n, chunk):
        s1 = min(n, s0 + chunk)
        g = torch.Generator(device=cache.device).manual_seed(gen_seed + s0)
        st = torch.randn(s1 - s0, cache.num_heads, cache.head_v, cache.head_k, device=cache.device,
                         generator=g) * 0.1
        cache.load_state(torch.arange(s0, s1, device=cache.device), st)


def rotation(bytes_per_slot: int, batch: int, cap: int = 64) -> int:
    """Number of slot groups so the groups' checkpoints exceed 4x L2 (capped)."""
    return int(min(cap, max(1, math.ceil(4 * L2_BYTES / max(1, bytes_per_slot * batch)))))


ACT_DTYPE = torch.bfloat16   # the benchmark's activations
RING_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}   # --ring-dtype (SSMStateCache ring_dtype)


def bench_inputs(family, batch, shape, window, device):
    """``window`` steps of :data:`ACT_DTYPE` decode inputs for ``batch`` rows, drawn on the device. With the shape's
    ``num_key_heads`` below ``num_heads`` the value heads of a key head share its key, as in the model: ``k_heads``
    ``[T, B, HK, K]`` holds them once (a cache with shared keys takes it) and ``k`` repeated per value head (the
    anchors and a cache with a key per value head take it)."""
    gen = torch.Generator(device=device).manual_seed(batch)
    x = random_decode_inputs(family, window, batch, shape["num_heads"], shape["head_k"], shape["head_v"],
                             dtype=ACT_DTYPE, device=device, generator=gen)
    return share_keys(x, shape_key_group(shape))


def step_keys(cache, x) -> torch.Tensor:
    """The keys of :func:`bench_inputs` that ``cache`` takes: per key head with shared keys, else per value head."""
    return x["k_heads"] if cache.key_group > 1 else x["k"]


#: launcher knobs: the fields of :class:`.launch.LaunchKnobs` (None = the heuristic)
LAUNCH_KNOBS = tuple(f.name for f in dataclasses.fields(LaunchKnobs))


def check_grid(families: str, specs: str) -> tuple[list[str], list[str]]:
    """The comma lists ``families`` and ``specs`` of a GPU script's command line, checked before any device work
    (ValueError naming the bad item and what is allowed)."""
    fams = [f.strip() for f in families.split(",") if f.strip()]
    specs_ = [s.strip() for s in specs.split(",") if s.strip()]
    unknown = [f for f in fams if f not in SHAPES]
    if unknown or not fams:
        raise ValueError(f"families {unknown or families!r}: allowed {', '.join(SHAPES)}")
    if not specs_:
        raise ValueError("empty --specs list")
    configs(specs_)
    return fams, specs_


def parse_knobs(text: str) -> dict:
    """Launcher knobs from ``"name=value,name=value"`` (names in :data:`LAUNCH_KNOBS`; values integers, true,
    false, none, or for the ``*_dot`` knobs a precision name); ``""`` / ``"default"`` -> ``{}``. ValueError on a bad
    item or a knob given twice. ``LaunchKnobs(**parse_knobs(text))`` checks the values."""
    text = text.strip()
    if text in ("", "default"):
        return {}
    knobs = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name, v = name.strip(), value.strip().lower()
        if not sep or name not in LAUNCH_KNOBS:
            raise ValueError(f"bad knob {item!r} in {text!r}: write name=value with a name in {', '.join(LAUNCH_KNOBS)}")
        if name in knobs:
            raise ValueError(f"knob {name} given twice in {text!r}: give each knob once")
        if v in ("true", "false", "none"):
            knobs[name] = {"true": True, "false": False, "none": None}[v]
        elif name.endswith("_dot"):   # flush_dot, flush_items_dot, verify_dot: a precision name
            knobs[name] = v
        else:
            try:
                knobs[name] = int(v)
            except ValueError:
                raise ValueError(f"knob {name}: value {value!r} is not an integer, true, false or none") from None
    return knobs


PHASES = ("step", "staggered", "nonflush", "flush")   # what bench_kernel can time (its docstring)


def stagger_slots(cache, groups, x, window: int) -> None:
    """Spread the ring positions of every slot group: row i of a group (slot ``groups[r][i]``) is stepped
    ``i mod L`` times from its loaded state (inputs ``x[t]`` of the rows concerned), so on every later step
    about ``B / L`` rows of a group flush and the rest do not, as in serving, where sequences join at different
    steps. Slots must sit at ring position 0 (freshly loaded, or after whole rounds of L steps)."""
    for idx in groups:
        pos = torch.arange(idx.numel(), device=idx.device) % window
        for t in range(window - 1):
            rows = (pos > t).nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            cache.step(idx[rows], x["q"][t][rows], step_keys(cache, x)[t][rows], x["v"][t][rows], x["g"][t][rows],
                       None if x["beta"] is None else x["beta"][t][rows], validate=False)


def counters_snapshot(cache) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies of every slot's ring and flush counts (``SSMStateCache.ring_count``, ``flush_count``, int32 ``[S]``)."""
    return cache.ring_count[:-1].clone(), cache.flush_count[:-1].clone()


def whole_rounds_ok(cache, before: tuple[torch.Tensor, torch.Tensor]) -> bool:
    """Whether the counters after timing whole rounds of L steps over every slot say every step ran: each slot's
    ring count is back at its value in ``before`` (:func:`counters_snapshot`), every slot's flush count moved by
    the same positive number (one flush per slot and round), and no arrival count is left over
    (:meth:`.SSMStateCache.arrivals_clear`). A timed configuration whose steps skipped or repeated a flush fails it."""
    h0, f0 = before
    moved = cache.flush_count[:-1] - f0
    return bool(torch.equal(cache.ring_count[:-1], h0) and (moved == moved[0]).all() and moved[0] > 0
                and cache.arrivals_clear())


def bench_kernel(family, spec, mode, batch, shape, window, timer, device, x, knobs=None,
                 phases=("step", "staggered", "nonflush", "flush"), ring_dtype=torch.float32, shared_keys=True):
    """Time one decode configuration on inputs ``x`` (:func:`bench_inputs`); returns a dict row.

    ``shared_keys``: the cache keeps one key per key head where the shape's ``num_key_heads`` is below its
    ``num_heads`` (:class:`.state_cache.SSMStateCache` ``num_key_heads``; the model's layout); False: a key per
    value head (column ``key_heads``).

    ``knobs``: launcher knobs ``{name: value}`` (names in :data:`LAUNCH_KNOBS`; None values = heuristic).
    ``phases`` (:data:`PHASES`): what to time: ``step`` (time per step over L steps, all slots of a group at
    the same ring position, so the whole group flushes on one of the L steps: ``time_us``), ``staggered``
    (time per step over L steps with the slots' ring positions spread by :func:`stagger_slots`, so B / L rows
    flush on every step: ``staggered_us``, replay; conventional rows copy ``time_us``, they have no phase),
    ``nonflush`` (the L - 1 non-flush steps, replay), ``flush`` (the flush step, replay); the others are NaN.
    """
    bad = set(phases) - set(PHASES)
    if bad:
        raise ValueError(f"unknown phase(s) {sorted(bad)}; allowed: {', '.join(PHASES)}")
    knobs = {k: v for k, v in (knobs or {}).items() if v is not None}
    bad = set(knobs) - set(LAUNCH_KNOBS)
    if bad:
        raise ValueError(f"unknown launcher knob(s) {sorted(bad)}; allowed: {', '.join(LAUNCH_KNOBS)}")
    knobs = LaunchKnobs(**knobs)
    probe = SSMStateCache(family, spec, 1, shape["num_heads"], shape["head_k"], shape["head_v"],
                          window=window, mode=mode, backend="torch")
    ckpt_bytes = probe.hp.bytes_per_slot() + (0 if probe.spec.shared else probe.lp.bytes_per_slot())
    R = rotation(ckpt_bytes, batch) if device.type == "cuda" else 1
    cache = SSMStateCache(family, spec, batch * R, shape["num_heads"], shape["head_k"], shape["head_v"],
                          window=window, mode=mode, device=device, backend="triton", seed=1234,
                          ring_dtype=ring_dtype, knobs=knobs,
                          num_key_heads=shape_key_heads(shape, shared_keys))
    keys = step_keys(cache, x)
    _fill_states(cache, 7)
    groups = [torch.arange(r * batch, (r + 1) * batch, device=device, dtype=torch.int32) for r in range(R)]
    out = torch.empty(batch, cache.num_heads, cache.head_v, dtype=torch.float32, device=device)

    def rounds(ts):
        """Decode steps t in ``ts`` for every slot group (one CUDA graph per timed function)."""
        for t in ts:
            for idx in groups:
                cache.step(idx, x["q"][t], keys[t], x["v"][t], x["g"][t],
                           None if x["beta"] is None else x["beta"][t], out=out, validate=False)

    t_us = st_us = nf_us = fl_us = float("nan")
    rounds_ok = []   # whole_rounds_ok after each phase of whole rounds (step, staggered)
    if "step" in phases:
        before = counters_snapshot(cache)
        t_us = timer(lambda: rounds(range(window))) * 1e3 / (window * R)
        rounds_ok.append(whole_rounds_ok(cache, before))
    if "staggered" in phases:
        if mode == "replay" and window > 1:
            cache.ring_count.zero_()   # (whole rounds of L steps end where they began)
            stagger_slots(cache, groups, x, window)
            before = counters_snapshot(cache)
            st_us = timer(lambda: rounds(range(window))) * 1e3 / (window * R)
            rounds_ok.append(whole_rounds_ok(cache, before))
        else:
            st_us = t_us
    if mode == "replay" and window > 1 and "nonflush" in phases:
        # the L - 1 non-flush steps alone (ring counters reset first, so every replay sees h = 0 .. L-2)
        def nonflush():
            cache.ring_count.zero_()
            rounds(range(window - 1))

        nf_us = timer(nonflush) * 1e3 / ((window - 1) * R)

    if mode == "replay" and window > 1 and "flush" in phases:
        def flush():   # every slot one step before its flush (a difference L t - (L-1) t_nf is too noisy)
            cache.ring_count.fill_(window - 1)
            rounds([window - 1])

        fl_us = timer(flush) * 1e3 / R
    elems = batch * cache.num_heads * cache.head_k * cache.head_v
    min_bytes = cache.spec.step_bytes_per_element(mode, window, cache.head_k) * elems   # fp8/int8: row scales too
    row = dict(family=family, spec=cache.spec.text, mode=mode, batch=batch, time_us=t_us, staggered_us=st_us,
               nonflush_us=nf_us, flush_us=fl_us, min_bytes=min_bytes, GBps=min_bytes / (t_us * 1e-6) / 1e9,
               rotation=R, **plan_columns(plan_step(cache, batch), window),
               ring_dtype=str(ring_dtype).replace("torch.", "") if mode == "replay" else None,
               key_heads=cache.num_key_heads,
               finite=bool(torch.isfinite(out).all()), rounds_ok=all(rounds_ok) if rounds_ok else None)
    del cache, out
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def plan_columns(plan, window: int) -> dict:
    """The launch plan of a timed configuration as result columns (:class:`.launch.StepPlan`; the split step's
    launches only when split)."""
    nf, fl = plan.nonflush, plan.flush
    return dict(block_v=plan.block_v, flush_block_v=fl.sub_block_rows if fl else plan.flush_block_v,
                num_warps=plan.num_warps, maxnreg=plan.maxnreg or 0, split_flush=plan.split,
                step_advance=plan.step_advance, arrive_deferred=plan.arrive_lanes > 0,
                prefetch=bool(nf and nf.prefetch), nonflush_warps=nf.num_warps if nf else None,
                nonflush_maxnreg=(nf.maxnreg or 0) if nf else None, nonflush_stages=nf.stages if nf else None,
                nonflush_e2m1_ptx=nf.e2m1_ptx if nf else None,
                flush_item_v=fl.item_rows if fl else None, flush_warps=fl.num_warps if fl else None,
                flush_programs=fl.programs_per_sm if fl else None, flush_scratch=bool(fl and fl.scratch),
                flush_nvfp4_items=bool(fl and fl.nvfp4_items),
                flush_nvfp4_item_blocks=fl.nvfp4_item_blocks if fl and fl.nvfp4_items else None,
                flush_corrections_rows=fl.corrections_rows if fl else None,
                flush_scratch_l2=bool(fl and fl.scratch_l2),
                flush_dot=(fl.dot if fl else plan.dot) if window > 1 else None,
                flush_items_dot=fl.items_dot if fl and fl.nvfp4_items else None,
                flush_stream=int(fl.side_stream) if fl else None, flush_stages=fl.stages if fl else plan.stages)


#: the fla kernel each family's anchor row times (conventional fp32 decode, one token per call)
FLA_ANCHORS = {"gdn": "fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule",
               "kda": "fla.ops.kda.fused_recurrent_kda"}


def bench_fla(batch, shape, window, timer, device, family="gdn"):
    """fla's fused recurrent decode, one token, fp32 state ``[B, HV, V, K]`` (``state_v_first``): gdn
    ``fused_recurrent_gated_delta_rule`` with GVA (HV / 2 key heads -> HV value heads, Qwen3.5), kda
    ``fused_recurrent_kda`` (per-key decay ``g [B, 1, HV, K]``, as many key as value heads, Kimi-Linear)."""
    import importlib

    mod, _, name = FLA_ANCHORS[family].rpartition(".")
    fn = getattr(importlib.import_module(mod), name)
    HV, K, V = shape["num_heads"], shape["head_k"], shape["head_v"]
    H = HV // 2 if family == "gdn" else HV
    state_bytes = HV * K * V * 4
    R = rotation(state_bytes, batch)
    x = bench_inputs(family, batch, shape, 1, device)
    q = x["q"][:, :, :H].transpose(0, 1).contiguous()       # [B, 1, H, K]
    k = x["k"][:, :, :H].transpose(0, 1).contiguous()
    v = x["v"].transpose(0, 1).contiguous()                 # [B, 1, HV, V]
    g = x["g"].transpose(0, 1).contiguous()                 # [B, 1, HV] (kda: [B, 1, HV, K])
    beta = x["beta"].transpose(0, 1).contiguous().to(torch.bfloat16)
    states = [torch.randn(batch, HV, V, K, device=device) * 0.1 for _ in range(R)]

    def steps():
        for s in range(window):
            for h0 in states:
                fn(q, k, v, g=g, beta=beta, scale=1.0, initial_state=h0, output_final_state=True,
                   state_v_first=True)

    ms = timer(steps)
    t_us = ms * 1e3 / (window * R)
    min_bytes = 8.0 * batch * HV * K * V
    return dict(family=family, spec="fla fp32", mode=FLA_MODE, batch=batch, time_us=t_us,
                staggered_us=t_us, nonflush_us=float("nan"), flush_us=float("nan"), min_bytes=min_bytes,
                GBps=min_bytes / (t_us * 1e-6) / 1e9, rotation=R, block_v=None,
                flush_block_v=None, finite=True)


#: the anchor's check (:func:`.mamba_ssm_anchor.check_anchor`) passes within this relative error: its output is bf16
#: (2^-9 relative rounding per element), far below it, while a wrong mapping (a sign, a transposed state) is O(1)
ANCHOR_REL_TOL = 1e-2


def bench_mamba_ssm(batch, shape, window, timer, device, fn):
    """mamba_ssm's ``selective_state_update`` (``fn``, :mod:`.mamba_ssm_anchor`): the conventional Mamba-2 decode
    of one token, fp32 state ``[B, HV, V, K]`` updated in place, bf16 inputs and output."""
    from .mamba_ssm_anchor import anchor_args

    HV, K, V = shape["num_heads"], shape["head_k"], shape["head_v"]
    state_bytes = HV * K * V * 4
    R = rotation(state_bytes, batch)
    x = bench_inputs("mamba2", batch, shape, 1, device)
    args = [anchor_args(torch.randn(batch, HV, V, K, device=device) * 0.1, x["q"][0], x["k"][0], x["v"][0],
                        x["g"][0]) for _ in range(R)]

    def steps():
        for _ in range(window):
            for a in args:
                fn(**a)

    t_us = timer(steps) * 1e3 / (window * R)
    min_bytes = 8.0 * batch * HV * K * V
    return dict(family="mamba2", spec="mamba_ssm fp32", mode=MAMBA_SSM_MODE, batch=batch, time_us=t_us,
                staggered_us=t_us, nonflush_us=float("nan"), flush_us=float("nan"), min_bytes=min_bytes,
                GBps=min_bytes / (t_us * 1e-6) / 1e9, rotation=R, block_v=None, flush_block_v=None, finite=True)


# ------------------------------------------------------------------------------- driver
def tile_sweep(families, specs, batch, block_vs, shapes, window, timer, device, maxnregs=(None, 0),
               splits=(False, True)):
    """Replay timings of ``families`` x ``specs`` at ``batch`` over V-block sizes ``block_vs``, register
    caps ``maxnregs`` (None = the launcher's default, 0 = no cap; in a split step the cap applies to the
    flush launch, the non-flush launch keeps its own, :func:`.launch.plan_nonflush`) and ``splits`` (False: one fused kernel, True: non-flush
    and flush rows as separate launches; split steps are timed with the launcher's non-flush loop and with the
    unrolled loop with and without its prefetch, :func:`.launch.plan_nonflush`): the data
    behind the launcher's tile, split and prefetch heuristics. Returns a DataFrame (one row per
    configuration, columns as :func:`bench_kernel`)."""
    import pandas as pd
    from tqdm import tqdm

    rows = []
    # split steps: the launcher's non-flush loop (None), and the unrolled loop with / without the prefetch
    todo = [(f, s, bv, mr, sp, pf) for f in families for s in specs for bv in block_vs for mr in maxnregs
            for sp in splits for pf in ((None, True, False) if sp else (None,))]
    x, key = None, None
    for fam, spec, bv, mr, sp, pf in tqdm(todo, desc="tile sweep", disable=None):
        if key != fam:
            x, key = bench_inputs(fam, batch, shapes[fam], window, device), fam
        rows.append(bench_kernel(fam, spec, "replay", batch, shapes[fam], window, timer, device, x,
                                 dict(block_v=bv, maxnreg=mr, split_flush=sp, nonflush_prefetch=pf,
                                      nonflush_stages=None if pf is None else 0)))
    return pd.DataFrame(rows)


CPU_SMOKE_SPECS = ["fp32", "nvfp4/fp16"]   # --cpu-smoke defaults: a few minutes in the interpreter
CPU_SMOKE_BATCHES = [1, 2]
CPU_SMOKE_WINDOW = 4


def run_defaults(cpu_smoke: bool, specs=None, batches=None, window=None):
    """``(specs, batches, window)`` with the defaults of a GPU run or of a CPU smoke run filled in."""
    if cpu_smoke:
        return specs or CPU_SMOKE_SPECS, batches or CPU_SMOKE_BATCHES, window or CPU_SMOKE_WINDOW
    return specs or SPECS, batches or BATCHES, window or 16


def _device_and_shapes(cpu_smoke: bool, families):
    """The device and the shapes of a run (tiny ones in a CPU smoke run)."""
    if cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("--cpu-smoke needs TRITON_INTERPRET=1 in the environment")
        device, shapes = torch.device("cpu"), CPU_SMOKE_SHAPES
    else:
        if not torch.cuda.is_available():
            raise ValueError("bench needs a CUDA GPU (none visible); the kernels' CPU tests are in "
                             "tests/kernels (Triton interpreter)")
        device, shapes = torch.device("cuda"), SHAPES
    return device, {f: shapes[f] for f in families}


def _fla_families(families, device, notes) -> list[str]:
    """The families of this run that have an fla anchor fla can run here (:data:`FLA_ANCHORS`)."""
    fams = [f for f in families if f in FLA_ANCHORS]
    if not fams:
        return []
    if device.type != "cuda":
        notes.append("fla anchor not run (CPU smoke mode)")
        return []
    try:
        import fla.ops.gated_delta_rule  # noqa: F401
        return fams
    except Exception as e:  # pragma: no cover - depends on the machine
        notes.append(f"fla not importable ({type(e).__name__}: {e}); fla column skipped")
        return []


def _fla_rows(todo, shapes, window, timer, device, copy_bw, notes) -> list[dict]:
    """fla anchor rows for the ``(family, batch)`` pairs of ``todo``; a failure is noted and skips that family."""
    from tqdm import tqdm

    rows, failed = [], set()
    for fam, b in tqdm(todo, desc="fla", disable=None):
        if fam in failed:
            continue
        try:
            rows.append(dict(bench_fla(b, shapes[fam], window, timer, device, family=fam), copy_GBps=copy_bw))
        except Exception as e:  # pragma: no cover
            notes.append(f"fla {fam} run failed at B={b}: {type(e).__name__}: {e}")
            failed.add(fam)
    return rows


def _mamba_ssm_rows(todo, shapes, window, timer, device, copy_bw, src, notes) -> list[dict]:
    """Mamba-2 anchor rows (:func:`bench_mamba_ssm`) for the batches of ``todo`` when mamba_ssm's kernel loads
    (``src``: :func:`.mamba_ssm_anchor.load_selective_state_update`) and its check against the float64 oracle runs;
    otherwise a note says why there are none."""
    from .mamba_ssm_anchor import check_anchor, load_selective_state_update

    if not todo:
        return []
    if device.type != "cuda":
        notes.append("mamba_ssm anchor not run (CPU smoke mode)")
        return []
    try:
        fn = load_selective_state_update(src)
        x = bench_inputs("mamba2", 8, shapes["mamba2"], 1, device)
        err = check_anchor(fn, x["q"][0], x["k"][0], x["v"][0], x["g"][0])
        check = (f"one step from a random fp32 state, bf16 output, max rel. error {err:.2e} against the float64 "
                 f"oracle (allowed {ANCHOR_REL_TOL:.0e})")
        if not err <= ANCHOR_REL_TOL:
            notes.append(f"mamba_ssm anchor not timed: it failed its check ({check}); is --mamba-ssm-src the "
                         "mamba_ssm release whose selective_state_update kernels/mamba_ssm_anchor.py maps?")
            return []
        notes.append(f"mamba_ssm anchor (mamba2 rows, mode '{MAMBA_SSM_MODE}'): {check}")
        return [dict(bench_mamba_ssm(b, shapes["mamba2"], window, timer, device, fn), copy_GBps=copy_bw,
                     anchor_rel_err=err) for b in todo]
    except Exception as e:  # pragma: no cover - depends on the machine
        notes.append(f"mamba_ssm anchor not run ({type(e).__name__}: {e})")
        return []


def _resumed_rows(partial: str, resume: bool, notes, finished: str | None = None) -> list[dict]:
    """The measurements kept when resuming: those of a run cut short (``partial``, ``results.partial.csv``), else
    those of a finished run (``finished``, ``results.csv``: a resumed run then adds the families, specs or batches
    it lacks). Without ``resume`` a partial file is removed and nothing is kept."""
    import pandas as pd

    if not os.path.exists(partial):
        if not (resume and finished and os.path.exists(finished)):
            return []
        partial = finished
    elif not resume:
        os.remove(partial)
        return []
    rows = pd.read_csv(partial).to_dict("records")
    if rows and "copy_GBps" not in rows[0]:
        raise ValueError(f"{partial} has no copy_GBps column (written by an older bench): it cannot be "
                         "resumed; start a new --out folder")
    notes.append(f"resumed: {len(rows)} measurements from an earlier run into this folder "
                 f"({os.path.basename(partial)}; each row's copy_GBps is the copy bandwidth measured by the run that "
                 "timed it)")
    return rows


#: a run's settings (``out/settings.json``): a resumed run must have the same ones
SETTINGS_FILE = "settings.json"


def _check_resume_settings(out: str, settings: dict, resume: bool) -> None:
    """Refuse ``--resume`` into a folder whose measurements were taken with other settings (device, window, ring
    dtype, key layout, forced launch knobs): its rows would be kept under this run's header. A folder from before
    the settings were recorded is checked by its rows' ``ring_dtype`` column where it has one."""
    import pandas as pd

    results = [p for p in (os.path.join(out, "results.partial.csv"), os.path.join(out, "results.csv"))
               if os.path.exists(p)]
    if not (resume and results):
        return
    path = os.path.join(out, SETTINGS_FILE)
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        diff = [f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in settings.items() if old.get(k) != v]
    else:
        df = pd.read_csv(results[0])
        diff = []
        if "ring_dtype" in df:
            dtypes = set(df.ring_dtype.dropna()) - {settings["ring_dtype"]}
            diff += [f"ring_dtype: {sorted(dtypes)} there, {settings['ring_dtype']!r} now"] if dtypes else []
    if diff:
        raise ValueError(f"--resume into {out}: its measurements were taken with other settings ("
                         + "; ".join(diff) + "); resume with the same settings or use a new --out folder")


def _resumed_checks(path: str, resume: bool, families) -> list[dict]:
    """The device checks of the families outside ``families`` in ``path`` (``correctness.csv``) when resuming: a
    resumed run into another run's folder keeps their checks beside its own."""
    import pandas as pd

    if not (resume and os.path.exists(path)):
        return []
    return [r for r in pd.read_csv(path).to_dict("records") if r["family"] not in families]


def _write_sweep(out, sw) -> None:
    sw.to_csv(os.path.join(out, "sweep.csv"), index=False)
    cols = ["family", "spec", "batch", "block_v", "flush_block_v", "num_warps", "maxnreg", "split_flush",
            "prefetch", "time_us", "nonflush_us", "flush_us"]
    table = markdown_table(sw[cols], ".1f")
    with open(os.path.join(out, "report.md"), "a") as f:
        f.write("\n## Tile sweep (replay; maxnreg 0 = no register cap, of the flush launch when split; "
                "split_flush: non-flush and flush rows as separate launches, the non-flush one uncapped)\n\n"
                + table + "\n")
    print(table)


def run_bench(out, families=None, specs=None, batches=None, window=None, rep_ms=40, cpu_smoke=False,
              command=None, block_v=None, flush_block_v=None, maxnreg=None, sweep_block_v=None,
              sweep_maxnreg=(128, 0), sweep_specs=("fp32", "nvfp4/fp16"), sweep_families=("gdn",),
              split_flush=None, resume=False, ring_dtype="float32", mamba_ssm_src=None, shared_keys=True):
    """Run the whole benchmark and write the report; returns the results DataFrame.
    The device checks go to ``out/correctness.csv`` before any timing; the fla anchors are timed first, then every
    configuration. Measurements are appended to ``out/results.partial.csv`` as they finish; ``resume`` keeps the
    rows of that file (a run cut short), or else of ``out/results.csv`` (a finished run), and times only the
    missing (family, spec, mode, batch) configurations; the device checks of families outside ``families`` are
    kept from ``out/correctness.csv`` too (a run of other families resumed into the folder).

    ``split_flush`` (None = the launcher's heuristic, True/False forced): replay step as separate launches
    (non-flush rows, flush rows) or one fused kernel, for the main table (column ``split_flush``).
    ``sweep_block_v`` (list of V-block sizes): also run :func:`tile_sweep` for ``sweep_families`` x
    ``sweep_specs`` x ``sweep_maxnreg`` register caps (0 = none) x split off/on at the largest batch; written
    to ``sweep.csv``, appended to report.md and printed. ``ring_dtype`` (:data:`RING_DTYPES`): the dtype in which
    the timed caches' rings keep k and v (bfloat16: exact for the bf16 activations, half the ring bytes).
    ``shared_keys`` (:func:`bench_kernel`): the caches keep one key per key head of the model's shape (default) or
    one per value head.
    ``mamba_ssm_src``: where mamba_ssm's Triton decode kernel is, for the mamba2 anchor rows
    (:func:`.mamba_ssm_anchor.load_selective_state_update`; default ``$REPLAYSSM_MAMBA_SSM_SRC``, else an installed
    mamba_ssm; neither: no anchor rows, and a note says so).
    ``cpu_smoke``: tiny shapes in the Triton interpreter, by default :data:`CPU_SMOKE_SPECS` x
    :data:`CPU_SMOKE_BATCHES` at window :data:`CPU_SMOKE_WINDOW` (GPU defaults: :data:`SPECS`, :data:`BATCHES`,
    16), with progress bars on stderr."""
    import pandas as pd
    from tqdm import tqdm

    families = list(dict.fromkeys(families or SHAPES))   # (a name given twice is timed once)
    for f in families:
        if f not in SHAPES:
            raise ValueError(f"unknown family {f!r}; valid: {', '.join(SHAPES)}")
    specs, batches, window = run_defaults(cpu_smoke, specs, batches, window)
    specs, batches = list(dict.fromkeys(specs)), list(dict.fromkeys(batches))
    configs(specs)                      # bad specs fail here, before any work
    if ring_dtype not in RING_DTYPES:
        raise ValueError(f"ring dtype {ring_dtype!r}: allowed {', '.join(RING_DTYPES)}")
    if sweep_block_v and not set(sweep_families) & set(families):
        raise ValueError(f"--sweep-block-v times {', '.join(sweep_families)}, which --families leaves out")
    bars = dict(disable=False if cpu_smoke else None)   # tqdm: always shown in a smoke run (interpreted kernels are slow)
    device, shapes = _device_and_shapes(cpu_smoke, families)
    settings = dict(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)",
                    window=window, ring_dtype=ring_dtype, keys="shared" if shared_keys else "per-head",
                    block_v=block_v, flush_block_v=flush_block_v, maxnreg=maxnreg, split_flush=split_flush)
    _check_resume_settings(out, settings, resume)   # before anything in the folder is rewritten
    timer = Timer(device, rep_ms)
    notes = []
    t_start = time.time()
    bw = copy_bandwidth(device, timer, 1 << 30 if device.type == "cuda" else 1 << 20)
    corr = []
    for fam in tqdm(families, desc="correctness", **bars):
        # 20 rows on the GPU: the launcher then uses the large-batch tiles and register cap (BV=32 with two
        # 16-row flush sub-blocks, maxnreg 128) that the timed B=256 runs use
        corr += correctness(fam, shapes[fam], window, device, rows=20 if device.type == "cuda" else 2,
                            steps=None if device.type == "cuda" else window + 2, shared_keys=shared_keys,
                            ring_dtype=RING_DTYPES[ring_dtype])
    fla_fams = _fla_families(families, device, notes)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, SETTINGS_FILE), "w") as f:
        json.dump(settings, f, indent=1)
    if any(settings[k] is not None for k in ("block_v", "flush_block_v", "maxnreg", "split_flush")):
        notes.append("the device checks ran the launcher's own plans, not the forced --block-v / --flush-block-v / "
                     "--maxnreg / --split-flush of the timed rows")
    corr += _resumed_checks(os.path.join(out, "correctness.csv"), resume, families)
    pd.DataFrame(corr).to_csv(os.path.join(out, "correctness.csv"), index=False)   # (a run cut short keeps them)
    partial = os.path.join(out, "results.partial.csv")
    rows = _resumed_rows(partial, resume, notes, finished=os.path.join(out, "results.csv"))
    done = {(r["family"], r["spec"], r["mode"], int(r["batch"])) for r in rows}
    # the report covers every family in the folder, resumed ones from another --families included
    report_fams = list(families) + sorted({r["family"] for r in rows if r["family"] not in families})
    report_shapes = _device_and_shapes(cpu_smoke, report_fams)[1]
    # the fla anchors first (a run cut short keeps them with its other measurements, --resume)
    fla_todo = [(f, b) for f in fla_fams for b in batches if (f, "fla fp32", FLA_MODE, b) not in done]
    rows += _fla_rows(fla_todo, shapes, window, timer, device, bw["best"], notes)
    mamba_todo = [b for b in batches if "mamba2" in families and ("mamba2", "mamba_ssm fp32", MAMBA_SSM_MODE, b) not in done]
    rows += _mamba_ssm_rows(mamba_todo, shapes, window, timer, device, bw["best"], mamba_ssm_src, notes)
    if rows:
        pd.DataFrame(rows).to_csv(partial, index=False)
    todo = [(f, b, s, m) for f in families for b in batches for (s, m) in configs(specs)
            if (f, s, m, b) not in done]
    knobs = dict(block_v=block_v, flush_block_v=flush_block_v, maxnreg=maxnreg, split_flush=split_flush)
    x, key = None, None
    for fam, b, spec, mode in tqdm(todo, desc="bench", **bars):
        if key != (fam, b):
            x, key = None, (fam, b)
            x = bench_inputs(fam, b, shapes[fam], window, device)
        rows.append(dict(bench_kernel(fam, spec, mode, b, shapes[fam], window, timer, device, x, knobs,
                                      ring_dtype=RING_DTYPES[ring_dtype], shared_keys=shared_keys),
                         copy_GBps=bw["best"]))
        pd.DataFrame(rows).to_csv(partial, index=False)   # a run cut short keeps what it measured (--resume)
    del x
    df = pd.DataFrame(rows)
    add_ratios(df)
    if not df.finite.all():
        notes.append("non-finite outputs in: " + ", ".join(
            f"{r.family} {r.spec} {r['mode']} B={r.batch}" for _, r in df[~df.finite].iterrows()))
    skipped = df[df.get("rounds_ok", pd.Series(True, index=df.index)).eq(False)]
    if len(skipped):
        notes.append("counters off after timing whole rounds (a step skipped or repeated a flush; the row's time "
                     "is not of the configuration): " + ", ".join(
                         f"{r.family} {r.spec} {r['mode']} B={r.batch}" for _, r in skipped.iterrows()))
    notes.append(f"bench wall time {time.time() - t_start:.0f} s")
    meta = dict(command=command or " ".join(sys.argv), date=datetime.datetime.now(datetime.timezone.utc)
                .strftime("%Y-%m-%d %H:%M UTC"),
                device=settings["device"], versions=_versions(), window=window, copy_GBps=bw["best"], copy_detail=bw,
                shapes=report_shapes,
                ring_dtype=ring_dtype, shared_keys=shared_keys)
    mem_specs = list(dict.fromkeys(specs + [s for s in df.spec[df["mode"].isin(("replay", "conventional"))]]))
    write_report(out, df, memory_table(mem_specs, report_shapes, window, RING_DTYPES[ring_dtype], shared_keys), corr,
                 meta, notes)
    os.remove(partial)
    if sweep_block_v:
        configs(list(sweep_specs))
        fams = [f for f in sweep_families if f in shapes]
        _write_sweep(out, tile_sweep(fams, list(sweep_specs), max(batches), sweep_block_v, shapes, window, timer,
                                     device, list(sweep_maxnreg)))
    return df
