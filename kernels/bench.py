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
``fused_recurrent_gated_delta_rule`` (GVA, fp32 state) is the outside GDN anchor when
importable. Correctness on the device: fp32 replay/conventional outputs and
checkpoints against the float64 oracle (the only tl.dot, in the replay flush, is fp32
with input_precision="ieee": no TF32). Replay rows also report the time of a non-flush step alone
(``nonflush_us``) and the flush step alone (``flush_us``: every slot's ring count set to L - 1 first). The
main replay time (``time_us``) starts every slot of a group at the same ring position, so a group's flushes
all fall on one of the L steps; ``staggered_us`` spreads the positions (:func:`stagger_slots`: B / L rows
flush on every step, as in serving, where sequences join at different steps). Both carry one flush per slot
per L steps, and both are reported with their ratios.

Writes ``results.csv``, ``memory.csv``, ``correctness.csv``, ``report.md`` and
``bench.png`` under ``--out`` (plus ``sweep.csv`` with ``--sweep-block-v``: replay times over V-block
sizes with and without the launcher's register cap, each fused and split: the replay step as one kernel, or
as separate launches, non-flush rows then flush rows). ``split_flush`` (``--split-flush auto|on|off``) sets the
launcher's split for the main table; the rows record the one used.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import sys
import time

import torch

from .inputs import random_decode_inputs
from .naive import oracle_sequence
from .state_cache import SSMStateCache

SHAPES = {  # one layer per sequence (DESIGN.md sec. 7)
    "gdn": dict(num_heads=32, head_k=128, head_v=128, note="Qwen3.5-4B: HV=32 value heads (16 key heads), K=V=128"),
    "mamba2": dict(num_heads=128, head_k=128, head_v=64, note="Nemotron-H: 128 heads, headdim 64, dstate 128, 8 groups"),
    "kda": dict(num_heads=32, head_k=128, head_v=128, note="Kimi-Linear: 32 heads, K=V=128"),
}
SPECS = ["fp32", "fp16", "fp8+sr", "int8+sr", "nvfp4+sr", "nvfp4/fp16", "nvfp4/fp8+sr", "nvfp4/int8+sr"]
BATCHES = [1, 16, 64, 256, 512]
L2_BYTES = 60 * 2 ** 20
CPU_SMOKE_SHAPES = {f: dict(num_heads=2, head_k=32, head_v=16, note="cpu smoke") for f in SHAPES}


def configs(specs):
    """(spec, mode) pairs: conventional for shared specs, replay for all."""
    from replayssm_quant.quant import parse_state_spec

    out = []
    for s in specs:
        sp = parse_state_spec(s)
        if sp.shared:
            out.append((sp.text, "conventional"))
        out.append((sp.text, "replay"))
    return out


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
    """``window`` steps of :data:`ACT_DTYPE` decode inputs for ``batch`` rows, drawn on the device."""
    gen = torch.Generator(device=device).manual_seed(batch)
    return random_decode_inputs(family, window, batch, shape["num_heads"], shape["head_k"], shape["head_v"],
                                dtype=ACT_DTYPE, device=device, generator=gen)


# launcher knobs (cache attributes read by kernels.decode; None = the heuristic): block_v, flush_block_v and
# maxnreg (0 = no register cap) of launch_config; split_flush (True: the replay step as separate launches,
# non-flush rows then flush rows; False: one fused kernel); nonflush_prefetch, nonflush_warps (nonflush_config),
# nonflush_maxnreg (the non-flush launch's register cap, 0 = none; nonflush_config), nonflush_stages (its
# key-chunk pipeline stages, 0 = none; nonflush_config); flush_item_v,
# flush_prefetch, flush_scratch, flush_programs (flush_config); flush_dot (flush_dot_precision); flush_stream
# (decode.flush_stream_mode); flush_stages (decode.flush_stages); nonflush_xscratch (decode.nonflush_input_scratch);
# flush_nvfp4_items (decode.nvfp4_flush_parts); num_warps (the fused and conventional launches' warps, launch_config)
LAUNCH_KNOBS = ("block_v", "flush_block_v", "maxnreg", "split_flush", "nonflush_prefetch", "flush_item_v",
                "flush_prefetch", "flush_scratch", "flush_dot", "flush_programs", "nonflush_warps",
                "nonflush_maxnreg", "flush_stream", "nonflush_stages", "flush_stages", "nonflush_xscratch",
                "flush_nvfp4_items", "num_warps")


def parse_knobs(text: str) -> dict:
    """Launcher knobs from ``"name=value,name=value"`` (names in :data:`LAUNCH_KNOBS`; values integers, true,
    false, none, or for ``flush_dot`` a precision name); ``""`` / ``"default"`` -> ``{}``. ValueError on a bad
    item."""
    text = text.strip()
    if text in ("", "default"):
        return {}
    knobs = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name, v = name.strip(), value.strip().lower()
        if not sep or name not in LAUNCH_KNOBS:
            raise ValueError(f"bad knob {item!r} in {text!r}: write name=value with a name in {', '.join(LAUNCH_KNOBS)}")
        if v in ("true", "false", "none"):
            knobs[name] = {"true": True, "false": False, "none": None}[v]
        elif name == "flush_dot":
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
            cache.step(idx[rows], x["q"][t][rows], x["k"][t][rows], x["v"][t][rows], x["g"][t][rows],
                       None if x["beta"] is None else x["beta"][t][rows], validate=False)


def bench_kernel(family, spec, mode, batch, shape, window, timer, device, x, knobs=None,
                 phases=("step", "staggered", "nonflush", "flush"), ring_dtype=torch.float32):
    """Time one decode configuration on inputs ``x`` (:func:`bench_inputs`); returns a dict row.

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
    probe = SSMStateCache(family, spec, 1, shape["num_heads"], shape["head_k"], shape["head_v"],
                          window=window, mode=mode, backend="torch")
    ckpt_bytes = probe.hp.bytes_per_slot() + (0 if probe.spec.shared else probe.lp.bytes_per_slot())
    R = rotation(ckpt_bytes, batch) if device.type == "cuda" else 1
    cache = SSMStateCache(family, spec, batch * R, shape["num_heads"], shape["head_k"], shape["head_v"],
                          window=window, mode=mode, device=device, backend="triton", seed=1234,
                          ring_dtype=ring_dtype)
    for name, value in knobs.items():
        setattr(cache, name, value)
    _fill_states(cache, 7)
    groups = [torch.arange(r * batch, (r + 1) * batch, device=device, dtype=torch.int32) for r in range(R)]
    out = torch.empty(batch, cache.num_heads, cache.head_v, dtype=torch.float32, device=device)

    def rounds(ts):
        """Decode steps t in ``ts`` for every slot group (one CUDA graph per timed function)."""
        for t in ts:
            for idx in groups:
                cache.step(idx, x["q"][t], x["k"][t], x["v"][t], x["g"][t],
                           None if x["beta"] is None else x["beta"][t], out=out, validate=False)

    t_us = st_us = nf_us = fl_us = float("nan")
    if "step" in phases:
        t_us = timer(lambda: rounds(range(window))) * 1e3 / (window * R)
    if "staggered" in phases:
        if mode == "replay" and window > 1:
            cache.ring_count.zero_()   # (whole rounds of L steps end where they began)
            stagger_slots(cache, groups, x, window)
            st_us = timer(lambda: rounds(range(window))) * 1e3 / (window * R)
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
    from .decode import (flush_config, flush_dot_precision, flush_stages, flush_stream_mode, launch_config,
                         nonflush_config, nvfp4_flush_parts)
    launch = launch_config(cache, batch)
    bv, bvf, nw, _, mr, split = launch
    _, _, pf, nfw, nfmr, nfst = nonflush_config(cache, batch)
    if split:
        bvi, bvf, nwf, _, fpre, fscr, fprog, fst = flush_config(cache, batch, launch)
    else:
        bvi, nwf, fpre, fscr, fprog, fst = None, None, False, False, None, flush_stages(cache)
    row = dict(family=family, spec=cache.spec.text, mode=mode, batch=batch, time_us=t_us, staggered_us=st_us,
               nonflush_us=nf_us, flush_us=fl_us, min_bytes=min_bytes, GBps=min_bytes / (t_us * 1e-6) / 1e9,
               rotation=R,
               block_v=bv, flush_block_v=bvf, num_warps=nw, maxnreg=mr or 0, split_flush=bool(split),
               prefetch=bool(split) and pf, nonflush_warps=nfw if split else None,
               nonflush_maxnreg=(nfmr or 0) if split else None, nonflush_stages=nfst if split else None,
               flush_item_v=bvi, flush_warps=nwf, flush_programs=fprog, flush_prefetch=fpre,
               flush_scratch=fscr,
               flush_nvfp4_items=nvfp4_flush_parts(cache, fscr, batch * cache.num_heads, device) if split else 0,
               flush_dot=flush_dot_precision(cache, split) if window > 1 else None,
               flush_stream=flush_stream_mode(cache) if split else None, flush_stages=fst,
               ring_dtype=str(ring_dtype).replace("torch.", "") if mode == "replay" else None,
               finite=bool(torch.isfinite(out).all()))
    del cache, out
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def bench_fla(batch, shape, window, timer, device):
    """fla fused_recurrent_gated_delta_rule, one token, GVA (16 key heads -> 32 value heads), fp32 state."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    HV, K, V = shape["num_heads"], shape["head_k"], shape["head_v"]
    H = HV // 2
    state_bytes = HV * K * V * 4
    R = rotation(state_bytes, batch)
    x = bench_inputs("gdn", batch, shape, 1, device)
    q = x["q"][:, :, :H].transpose(0, 1).contiguous()       # [B, 1, H, K]
    k = x["k"][:, :, :H].transpose(0, 1).contiguous()
    v = x["v"].transpose(0, 1).contiguous()                 # [B, 1, HV, V]
    g = x["g"].transpose(0, 1).contiguous()
    beta = x["beta"].transpose(0, 1).contiguous().to(torch.bfloat16)
    states = [torch.randn(batch, HV, V, K, device=device) * 0.1 for _ in range(R)]

    def steps():
        for s in range(window):
            for h0 in states:
                fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, scale=1.0, initial_state=h0,
                                                 output_final_state=True, state_v_first=True)

    ms = timer(steps)
    t_us = ms * 1e3 / (window * R)
    min_bytes = 8.0 * batch * HV * K * V
    return dict(family="gdn", spec="fla fp32", mode="fla fused_recurrent", batch=batch, time_us=t_us,
                staggered_us=t_us, nonflush_us=float("nan"), flush_us=float("nan"), min_bytes=min_bytes,
                GBps=min_bytes / (t_us * 1e-6) / 1e9, rotation=R, block_v=None,
                flush_block_v=None, finite=True)


# ------------------------------------------------------------------------------- correctness
def correctness(family, shape, window, device, steps=None, rows=3):
    """fp32 (replay, also with staggered rows; conventional) and nvfp4/fp32 (dual, also with staggered rows) on the
    device vs the float64 oracle; nvfp4+sr and
    nvfp4/fp8+sr replay: the split step against the fused kernel; nvfp4/fp16: the split flush's 3xTF32 dots
    against IEEE ones, the recurrence checkpoint vs the float64 oracle."""
    HV, K, V = shape["num_heads"], shape["head_k"], shape["head_v"]
    T = steps or 2 * window + 3
    x = random_decode_inputs(family, T, rows, HV, K, V, device=device,
                             generator=torch.Generator().manual_seed(99))
    S0 = torch.randn(rows, HV, V, K, generator=torch.Generator().manual_seed(98)) * 0.3
    o_ref, s_ref = oracle_sequence(family, S0.to(device), *(None if x[n] is None else x[n]
                                                            for n in ("q", "k", "v", "g", "beta")))
    def rel(a, ref):
        return ((a - ref).abs().max() / ref.abs().max()).item()

    def vs_oracle(c, all_outputs, stagger=False):
        """T steps of cache ``c`` from S0: the largest relative errors against the oracle of the outputs (every
        step, or the flush steps) and of the recurrence checkpoint after each flush. ``stagger``: row i joins at
        step i mod L (its own steps 0 .. T-1 then), so on most steps one or two rows flush, not all of them."""
        idx = torch.arange(rows, device=device)
        c.load_state(idx, S0.to(device))
        start = idx % c.window if stagger else torch.zeros_like(idx)
        out_err, ckpt_err = 0.0, 0.0
        for t in range(T + int(start.max())):
            tau = t - start                          # each row's own step
            act = ((tau >= 0) & (tau < T)).nonzero().squeeze(1)
            ta, ia = tau[act], idx[act]
            o = c.step(ia, *(None if x[n] is None else x[n][ta, ia] for n in ("q", "k", "v", "g", "beta"))).double()
            flush = (ta + 1) % c.window == 0         # (conventional: window 1, every step)
            if all_outputs:
                out_err = max(out_err, rel(o, o_ref[ta, ia]))
            elif flush.any():
                out_err = max(out_err, rel(o[flush], o_ref[ta[flush], ia[flush]]))
            if flush.any():
                ckpt_err = max(ckpt_err, rel(c.checkpoint(ia[flush]).double(), s_ref[ta[flush], ia[flush]]))
        return out_err, ckpt_err

    res = []
    for spec, mode, stagger in (("fp32", "replay", False), ("fp32", "replay", True), ("fp32", "conventional", False),
                                ("nvfp4/fp32", "replay", False), ("nvfp4/fp32", "replay", True)):
        c = SSMStateCache(family, spec, rows, HV, K, V, window=window, mode=mode, device=device,
                          backend="triton")
        out_err, ckpt_err = vs_oracle(c, spec == "fp32", stagger)
        what = ("all outputs" if spec == "fp32" else "flush-step outputs") + (
            "; rows staggered (split flush launch with one or two flush rows: sub-block items"
            + (", nvfp4: decode._nvfp4_part_kernel)" if "nvfp4" in spec else ")") if stagger else "")
        res.append(dict(family=family, spec=spec, mode=mode, steps=T, checked=what,
                        max_rel_out_err=out_err, max_rel_ckpt_err=ckpt_err,
                        ok=bool(out_err < 1e-5 and ckpt_err < 1e-5)))
    # the split step (separate non-flush / flush launches) against the fused kernel on the same inputs (no oracle
    # for rounded formats), over the first L steps (the flush included): outputs to fp32 rounding. The two kernels'
    # reductions may round in a different order, so the cached corrections (shared delta-rule specs) and hence
    # S_L can differ in the last bit: a head's nvfp4 scale s_enc then differs by an ulp (every element of the
    # head decodes ~1e-7 apart) and a stochastic rounding may land one quantum apart in rare elements. So the
    # share of decoded checkpoint elements more than 1e-5 (of the largest) apart is reported and bounded.
    # (both launches with the split launch's flush-dot precision: 3xTF32 for nvfp4/fp8+sr, flush_dot_precision)
    from .decode import flush_dot_precision
    for spec in ("nvfp4+sr", "nvfp4/fp8+sr"):
        cs = []
        for split in (False, True):
            c = SSMStateCache(family, spec, rows, HV, K, V, window=window, device=device, backend="triton", seed=3)
            c.split_flush = split
            c.flush_dot = flush_dot_precision(c, split=True)
            c.load_state(torch.arange(rows, device=device), S0.to(device))
            cs.append(c)
        idx = torch.arange(rows, device=device)
        out_err = 0.0
        for t in range(window):
            o = [c.step(idx, x["q"][t], x["k"][t], x["v"][t], x["g"][t],
                        None if x["beta"] is None else x["beta"][t]).double() for c in cs]
            out_err = max(out_err, rel(o[1], o[0]))
        ck = [c.checkpoint(idx).double() for c in cs]
        frac = ((ck[1] - ck[0]).abs() > 1e-5 * ck[0].abs().max()).double().mean().item()
        res.append(dict(family=family, spec=spec, mode="replay", steps=window,
                        checked="split vs fused: outputs; ckpt column = share of checkpoint elements > 1e-5 apart",
                        max_rel_out_err=out_err, max_rel_ckpt_err=frac, ok=bool(out_err < 1e-5 and frac < 1e-4)))
    # the split flush's 3xTF32 dots (the default of a dual nvfp4 spec, flush_dot_precision) against IEEE ones: the
    # fp16 recurrence checkpoint's error against the float64 oracle after each flush (fp16 rounding dominates both)
    errs = {}
    for dot in ("ieee", "tf32x3"):
        c = SSMStateCache(family, "nvfp4/fp16", rows, HV, K, V, window=window, device=device, backend="triton")
        c.split_flush, c.flush_dot = True, dot
        errs[dot] = vs_oracle(c, False)[1]
    res.append(dict(family=family, spec="nvfp4/fp16", mode="replay", steps=T,
                    checked="split flush, 3xTF32 dots: ckpt vs oracle; out column = the same with IEEE dots",
                    max_rel_out_err=errs["ieee"], max_rel_ckpt_err=errs["tf32x3"],
                    ok=bool(errs["tf32x3"] <= 1.1 * errs["ieee"] + 1e-6)))
    return res


# ------------------------------------------------------------------------------- report
def memory_table(specs, shapes, window, ring_dtype=torch.float32):
    rows = []
    for fam, shape in shapes.items():
        for spec, mode in configs(specs):
            c = SSMStateCache(fam, spec, 1, shape["num_heads"], shape["head_k"], shape["head_v"],
                              window=window, mode=mode, backend="torch", ring_dtype=ring_dtype)
            ck = c.hp.bytes_per_slot() + (0 if c.spec.shared else c.lp.bytes_per_slot())
            rows.append(dict(family=fam, spec=c.spec.text, mode=mode, checkpoint_bytes=ck,
                             ring_bytes=c.bytes_per_slot() - ck, total_bytes=c.bytes_per_slot(),
                             total_MiB=c.bytes_per_slot() / 2 ** 20))
    return rows


def _versions():
    v = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        import fla
        v["fla"] = getattr(fla, "__version__", "?")
    except Exception:
        v["fla"] = "not importable"
    return v


def run_header(device) -> list[str]:
    """Markdown lines naming how a GPU result was produced: command, UTC date, device, package versions."""
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [f"- command: `{' '.join(sys.argv)}`", f"- date: {date}", f"- device: {dev}",
            f"- versions: {', '.join(f'{k} {v}' for k, v in _versions().items())}"]


def write_table(out, stem, title, frame, device, columns=None, floatfmt=".1f") -> str:
    """Write ``frame`` to ``out/stem.csv`` and its ``columns`` (default all) to ``out/stem.md`` (title,
    :func:`run_header`, the table); returns the markdown table (scripts print it)."""
    frame.to_csv(os.path.join(out, f"{stem}.csv"), index=False)
    table = markdown_table(frame[columns] if columns else frame, floatfmt)
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write("\n".join([f"# {title}", "", *run_header(device), "", table, ""]))
    return table


def _targets(df):
    """Lines checking the issue's H200 targets against the measured table, for the replay times with the
    slots' flushes on one step (``time_us``) and spread over the L steps (``staggered_us``)."""
    lines = []
    phases = (("aligned flushes", "time_us", "frac_copy_bw"),
              ("staggered flushes", "staggered_us", "staggered_frac_copy_bw"))
    for fam in sorted(df.family.unique()):
        d = df[df.family == fam]

        def t(spec, mode, b, col="time_us"):
            r = d[(d.spec == spec) & (d["mode"] == mode) & (d.batch == b)]
            return float(r[col].iloc[0]) if len(r) else float("nan")

        for b in sorted(d.batch.unique()):
            if b < 256:
                continue
            conv = t("fp32", "conventional", b)
            for name, col, _ in phases:
                lines.append(f"- {fam} B={b}, {name}: replay fp32 speedup over conventional fp32 = "
                             f"{conv / t('fp32', 'replay', b, col):.2f}x (target >= 1.7x); "
                             f"nvfp4/fp16 = {conv / t('nvfp4/fp16', 'replay', b, col):.2f}x (target >= 6x)"
                             + (f"; replay fp32 over fla = {t('fla fp32', 'fla fused_recurrent', b) / t('fp32', 'replay', b, col):.2f}x "
                                "(target >= 1.6x)" if fam == "gdn" else ""))
        if 1 in set(d.batch):
            lines.append(f"- {fam} B=1: replay fp32 / conventional fp32 time = "
                         f"{t('fp32', 'replay', 1) / t('fp32', 'conventional', 1):.2f} (target <= 1.1)")
    big = df[(df.batch >= 256) & (df["mode"] != "fla fused_recurrent")]
    for _, r in big.iterrows():
        need = 0.90 if r.spec == "fp32" else 0.75
        for name, _, col in phases if r["mode"] == "replay" else phases[:1]:
            if r[col] < need:
                lines.append(f"- below bandwidth target: {r.family} {r.spec} {r['mode']} B={r.batch}"
                             f"{', ' + name if r['mode'] == 'replay' else ''}: {100 * r[col]:.0f}% of copy "
                             f"bandwidth (target {100 * need:.0f}%)")
    return lines


def markdown_table(frame, floatfmt: str = ".3g") -> str:
    """A pandas DataFrame as a GitHub markdown table (no tabulate dependency)."""
    def cell(x):
        if isinstance(x, float):
            return "" if math.isnan(x) else format(x, floatfmt)
        return str(x)
    cols = [str(c) for c in frame.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        out.append("| " + " | ".join(cell(x) for x in row) + " |")
    return "\n".join(out)


def add_ratios(df) -> None:
    """Add to a results frame (in place): ``frac_copy_bw`` (min_bytes per ``time_us``, over copy_GBps),
    ``speedup_vs_conv_fp32`` and ``speedup_vs_fla`` (gdn) from ``time_us``, and the same from ``staggered_us``
    (rings at spread positions, :func:`stagger_slots`): ``staggered_frac_copy_bw``,
    ``staggered_speedup_vs_conv_fp32``, ``staggered_speedup_vs_fla``. The references (conventional fp32, fla)
    have no ring phase: their own time."""
    if "staggered_us" not in df:       # (a resumed partial file of an older bench)
        df["staggered_us"] = float("nan")
    conv = df[(df.spec == "fp32") & (df["mode"] == "conventional")].set_index(["family", "batch"]).time_us
    flat = df[df["mode"] == "fla fused_recurrent"].set_index("batch").time_us
    for pre, col in (("", "time_us"), ("staggered_", "staggered_us")):
        df[f"{pre}frac_copy_bw"] = df.min_bytes / (df[col] * 1e-6) / 1e9 / df.copy_GBps
        df[f"{pre}speedup_vs_conv_fp32"] = [conv.get((f, b), float("nan")) / t for f, b, t in
                                            zip(df.family, df.batch, df[col])]
        df[f"{pre}speedup_vs_fla"] = [flat.get(b, float("nan")) / t if f == "gdn" else float("nan")
                                      for f, b, t in zip(df.family, df.batch, df[col])]


def write_report(out, df, mem, corr, meta, notes):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    os.makedirs(out, exist_ok=True)
    df.to_csv(os.path.join(out, "results.csv"), index=False)
    mdf = pd.DataFrame(mem)
    mdf.to_csv(os.path.join(out, "memory.csv"), index=False)
    cdf = pd.DataFrame(corr)
    cdf.to_csv(os.path.join(out, "correctness.csv"), index=False)

    fams = list(dict.fromkeys(df.family))
    # row 0: replay with aligned flushes (time_us); row 1: staggered flushes (staggered_us; conventional and
    # fla rows have no ring phase: the same times in both rows)
    fig, axes = plt.subplots(2, len(fams), figsize=(6 * len(fams), 9.5), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for row, (col, phase) in enumerate((("time_us", "aligned flushes"),
                                        ("staggered_us", "staggered flushes (B / L rows flush per step)"))):
        for ax, fam in zip(axes[row], fams):
            d = df[df.family == fam]
            for i, ((spec, mode), g) in enumerate(d.groupby(["spec", "mode"], sort=False)):
                g = g.sort_values("batch")
                ax.plot(g.batch, g[col], marker="o", ls="--" if mode == "conventional" else "-",
                        color=colors[i % len(colors)], label=f"{spec} {mode}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch (sequences)")
            ax.set_ylabel("time per decode step (us)")
            ax.set_title(f"{fam}: {meta['shapes'][fam]['note']}\nreplay with {phase}", fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bench.png"), dpi=120)
    plt.close(fig)

    md = markdown_table

    lines = ["# Decode-kernel benchmark", "",
             f"- command: `{meta['command']}`", f"- date: {meta['date']}", f"- device: {meta['device']}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}",
             f"- window L = {meta['window']}; per-step time = median of triton.testing.do_bench over CUDA-graph "
             f"replays of L rounds x R slot groups (R chosen so the groups' checkpoints exceed 4x the "
             f"{L2_BYTES >> 20} MB L2), divided by L*R; activations bf16; the replay rings keep k and v in "
             f"{meta['ring_dtype']} (`ring_dtype`; betas, cumulative log decays and corrections in float32)",
             f"- device copy bandwidth (read + write, 1 GiB buffers, do_bench median, no CUDA graph): "
             f"{meta['copy_GBps']:.0f} GB/s (copy_ {meta['copy_detail']['copy']:.0f}, elementwise "
             f"{meta['copy_detail']['elementwise']:.0f})",
             "- minimum bytes = state bytes per step only (conventional 2R, replay R(1+1/L), dual W + 2R/L "
             "bytes per element); ring and activation traffic is extra", ""]
    for n in notes:
        lines.append(f"- note: {n}")
    lines += ["", "## Targets", ""] + (_targets(df) or ["- (no batch >= 256 rows)"])
    lines += ["", "## Correctness on the device (float64 oracle)", "", md(cdf, ".2e"), ""]
    lines += ["## Time per step (us)", ""]
    lines += ["Replay rows: aligned flushes (every slot of a group at the same ring position, so the group "
              "flushes on one of the L steps; the plot's top row), then staggered flushes (ring positions spread, "
              "B / L rows flush on every step, as in serving; the bottom row). Conventional and fla rows have no "
              "ring.", ""]
    for fam in fams:
        d = df[df.family == fam]
        piv = d.pivot_table(index=["spec", "mode"], columns="batch", values="time_us", sort=False)
        lines += [f"### {fam} ({meta['shapes'][fam]['note']})", "", md(piv.reset_index(), ".1f"), ""]
        r = d[d["mode"] == "replay"]
        if r.staggered_us.notna().any():
            piv = r.pivot_table(index=["spec", "mode"], columns="batch", values="staggered_us", sort=False)
            lines += [f"staggered flushes, {fam} replay:", "", md(piv.reset_index(), ".1f"), ""]
    lines += ["## All measurements", "",
              md(df[["family", "spec", "mode", "batch", "time_us", "staggered_us", "nonflush_us", "flush_us",
                     "min_bytes", "GBps", "frac_copy_bw", "staggered_frac_copy_bw",
                     "speedup_vs_conv_fp32", "staggered_speedup_vs_conv_fp32", "speedup_vs_fla",
                     "staggered_speedup_vs_fla", "rotation", "block_v", "flush_block_v", "num_warps",
                     "maxnreg", "split_flush", "prefetch"]]), "",
              "## Memory per sequence slot per layer (checkpoints + ring, L = "
              f"{meta['window']}; the ring's k and v in {meta['ring_dtype']})", "", md(mdf, ".4g"), "",
              "![time per step](bench.png)", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))


# ------------------------------------------------------------------------------- driver
def tile_sweep(families, specs, batch, block_vs, shapes, window, timer, device, maxnregs=(None, 0),
               splits=(False, True)):
    """Replay timings of ``families`` x ``specs`` at ``batch`` over V-block sizes ``block_vs``, register
    caps ``maxnregs`` (None = the launcher's default, 0 = no cap; in a split step the cap applies to the
    flush launch, the non-flush launch keeps its own, :func:`.decode.nonflush_config`) and ``splits`` (False: one fused kernel, True: non-flush
    and flush rows as separate launches; split steps are timed with the launcher's non-flush loop and with the
    unrolled loop with and without its prefetch, :func:`.decode.nonflush_config`): the data
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


def run_bench(out, families=None, specs=None, batches=None, window=16, rep_ms=40, cpu_smoke=False,
              command=None, block_v=None, flush_block_v=None, maxnreg=None, sweep_block_v=None,
              sweep_maxnreg=(128, 0), sweep_specs=("fp32", "nvfp4/fp16"), sweep_families=("gdn",),
              split_flush=None, resume=False, ring_dtype="float32"):
    """Run the whole benchmark and write the report; returns the results DataFrame.
    Measurements are appended to ``out/results.partial.csv`` as they finish; ``resume`` keeps the rows of
    that file (a run cut short) and times only the missing (family, spec, mode, batch) configurations.

    ``split_flush`` (None = the launcher's heuristic, True/False forced): replay step as separate launches
    (non-flush rows, flush rows) or one fused kernel, for the main table (column ``split_flush``).
    ``sweep_block_v`` (list of V-block sizes): also run :func:`tile_sweep` for ``sweep_families`` x
    ``sweep_specs`` x ``sweep_maxnreg`` register caps (0 = none) x split off/on at the largest batch; written
    to ``sweep.csv``, appended to report.md and printed. ``ring_dtype`` (:data:`RING_DTYPES`): the dtype in which
    the timed caches' rings keep k and v (bfloat16: exact for the bf16 activations, half the ring bytes)."""
    import pandas as pd
    from tqdm import tqdm

    families = families or list(SHAPES)
    for f in families:
        if f not in SHAPES:
            raise ValueError(f"unknown family {f!r}; valid: {', '.join(SHAPES)}")
    specs = specs or SPECS
    configs(specs)                      # bad specs fail here, before any work
    if ring_dtype not in RING_DTYPES:
        raise ValueError(f"ring dtype {ring_dtype!r}: allowed {', '.join(RING_DTYPES)}")
    batches = batches or BATCHES
    if cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError("--cpu-smoke needs TRITON_INTERPRET=1 in the environment")
        device, shapes = torch.device("cpu"), CPU_SMOKE_SHAPES
    else:
        if not torch.cuda.is_available():
            raise ValueError("bench needs a CUDA GPU (none visible); the kernels' CPU tests are in "
                             "tests/kernels (Triton interpreter)")
        device, shapes = torch.device("cuda"), SHAPES
    shapes = {f: shapes[f] for f in families}
    timer = Timer(device, rep_ms)
    notes = []
    t_start = time.time()
    bw = copy_bandwidth(device, timer, 1 << 30 if device.type == "cuda" else 1 << 20)
    copy_bw = bw["best"]

    corr = []
    for fam in tqdm(families, desc="correctness", disable=None):
        # 20 rows on the GPU: the launcher then uses the large-batch tiles and register cap (BV=32 with two
        # 16-row flush sub-blocks, maxnreg 128) that the timed B=256 runs use
        corr += correctness(fam, shapes[fam], window, device, rows=20 if device.type == "cuda" else 2,
                            steps=None if device.type == "cuda" else window + 2)

    fla_ok = False
    if "gdn" in families and device.type == "cuda":
        try:
            import fla.ops.gated_delta_rule  # noqa: F401
            fla_ok = True
        except Exception as e:  # pragma: no cover - depends on the machine
            notes.append(f"fla not importable ({type(e).__name__}: {e}); fla column skipped")
    elif "gdn" in families:
        notes.append("fla anchor not run (CPU smoke mode)")

    rows = []
    os.makedirs(out, exist_ok=True)
    partial = os.path.join(out, "results.partial.csv")
    done = set()
    if resume and os.path.exists(partial):
        rows = pd.read_csv(partial).to_dict("records")
        if rows and "copy_GBps" not in rows[0]:
            raise ValueError(f"{partial} has no copy_GBps column (written by an older bench): it cannot be "
                             "resumed; start a new --out folder")
        done = {(r["family"], r["spec"], r["mode"], int(r["batch"])) for r in rows}
        notes.append(f"resumed: {len(rows)} measurements from an earlier run into this folder (each row's "
                     "copy_GBps is the copy bandwidth measured by the run that timed it)")
    elif os.path.exists(partial):
        os.remove(partial)
    todo = [(f, b, s, m) for f in families for b in batches for (s, m) in configs(specs)
            if (f, s, m, b) not in done]
    x, key = None, None
    for fam, b, spec, mode in tqdm(todo, desc="bench", disable=None):
        if key != (fam, b):
            x, key = None, (fam, b)
            x = bench_inputs(fam, b, shapes[fam], window, device)
        rows.append(dict(bench_kernel(fam, spec, mode, b, shapes[fam], window, timer, device, x,
                                      dict(block_v=block_v, flush_block_v=flush_block_v, maxnreg=maxnreg,
                                           split_flush=split_flush), ring_dtype=RING_DTYPES[ring_dtype]),
                         copy_GBps=copy_bw))
        pd.DataFrame(rows).to_csv(partial, index=False)   # a run cut short keeps what it measured (--resume)
    del x
    if fla_ok:
        for b in tqdm(batches, desc="fla", disable=None):
            try:
                rows.append(dict(bench_fla(b, shapes["gdn"], window, timer, device), copy_GBps=copy_bw))
            except Exception as e:  # pragma: no cover
                notes.append(f"fla run failed at B={b}: {type(e).__name__}: {e}")
                break
    df = pd.DataFrame(rows)
    add_ratios(df)
    if not df.finite.all():
        notes.append("non-finite outputs in: " + ", ".join(
            f"{r.family} {r.spec} {r['mode']} B={r.batch}" for _, r in df[~df.finite].iterrows()))
    notes.append(f"bench wall time {time.time() - t_start:.0f} s")
    meta = dict(command=command or " ".join(sys.argv), date=datetime.datetime.now(datetime.timezone.utc)
                .strftime("%Y-%m-%d %H:%M UTC"),
                device=torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu (Triton interpreter)",
                versions=_versions(), window=window, copy_GBps=copy_bw, copy_detail=bw, shapes=shapes,
                ring_dtype=ring_dtype)
    write_report(out, df, memory_table(specs, shapes, window, RING_DTYPES[ring_dtype]), corr, meta, notes)
    os.remove(partial)
    if sweep_block_v:
        configs(list(sweep_specs))
        fams = [f for f in sweep_families if f in shapes]
        sw = tile_sweep(fams, list(sweep_specs), max(batches), sweep_block_v, shapes, window, timer, device,
                        list(sweep_maxnreg))
        sw.to_csv(os.path.join(out, "sweep.csv"), index=False)
        cols = ["family", "spec", "batch", "block_v", "flush_block_v", "num_warps", "maxnreg", "split_flush",
                "prefetch", "time_us", "nonflush_us", "flush_us"]
        table = markdown_table(sw[cols], ".1f")
        with open(os.path.join(out, "report.md"), "a") as f:
            f.write("\n## Tile sweep (replay; maxnreg 0 = no register cap, of the flush launch when split; "
                    "split_flush: non-flush and flush rows as separate launches, the non-flush one uncapped)\n\n"
                    + table + "\n")
        print(table)
    return df
