"""Where a decode step's time goes, per kernel launch (GPU): the CUDA time of each Triton kernel of the step.

For each (family, spec, mode) at each batch: L rounds of the step on one slot group (so every slot goes through
its L - 1 non-flush steps and one flush), timed under torch.profiler (CUDA activity, no CUDA graph: the
per-kernel times are what matters here, launch gaps are not counted). ``--stagger``: the replay specs also with
the slots' ring positions spread as in the bench's staggered rows (``kernels.bench.stagger_slots``: B / L rows
flush on every step; mode ``replay staggered``). Prints one table (kernel, launches, total and per-step
microseconds) and writes it to ``OUT/profile.md`` / ``.csv``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/profile_step.py --out "$OUT/profile" [--batch 1,256]

Under Nsight Compute (``--rounds 0``: warm-up steps only; the 16th ``_flush_kernel`` launch flushes every row):

    ncu --clock-control none -k regex:_flush_kernel --launch-skip 15 --launch-count 1 --section SpeedOfLight \
        python3 scripts/gpu/profile_step.py --out /tmp/p --families gdn --specs fp32 --rounds 0

``--rounds 0 --ncu-window``: after the warm-up, L - 2 more steps, then the last non-flush step (ring count
L - 2) and the flush step of every replay spec between ``cudaProfilerStart`` / ``Stop``, so that
``ncu --profile-from-start off`` profiles exactly those two steps' launches of each spec and batch (launch order
per split step: ``_nonflush_kernel``, ``_flush_rows_kernel`` (nvfp4 sub-block items: ``_nvfp4_part_kernel``),
``_flush_kernel``, ``_advance_kernel``; a fused step: ``_decode_step_kernel`` alone, which advances the counters
itself); with
``--stagger`` the same two steps with staggered slots. The call that runs it: ``.gpu/calls/call_h28.sh`` (issue 28).
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import (CPU_SMOKE_SHAPES, RING_DTYPES, SHAPES, _fill_states, bench_inputs,  # noqa: E402
                                           check_grid, parse_knobs, shape_key_heads, stagger_slots, step_keys)
from replayssm_quant.kernels.bench_report import write_table  # noqa: E402
from replayssm_quant.kernels.launch import LaunchKnobs  # noqa: E402
from replayssm_quant.kernels.state_cache import SSMStateCache  # noqa: E402


def profile_config(family, spec, mode, batch, window, rounds, ring_dtype="float32", stagger=False,
                   ncu_window=False, shapes=SHAPES, device=None, shared_keys=True, knobs=None):
    """The per-kernel rows of one configuration (``rounds`` x L profiled steps after 2 L warm-up steps; 0: none,
    and with ``ncu_window`` the two steps for ``ncu --profile-from-start off``, see the module docstring).
    ``shared_keys``: the ring keeps one key per key head of the shape, as the benchmark times it and the models
    have it (False: a key per value head). ``knobs``: launcher knobs (a :class:`LaunchKnobs`; None: the heuristics)."""
    shape = shapes[family]
    dev = device or torch.device("cuda")
    cache = SSMStateCache(family, spec, batch, shape["num_heads"], shape["head_k"], shape["head_v"], window=window,
                          mode=mode, device=dev, backend="triton", seed=1, ring_dtype=RING_DTYPES[ring_dtype],
                          num_key_heads=shape_key_heads(shape, shared_keys), knobs=knobs)
    _fill_states(cache, 7)
    x = bench_inputs(family, batch, shape, window, dev)
    keys = step_keys(cache, x)
    idx = torch.arange(batch, device=dev, dtype=torch.int32)
    out = torch.empty(batch, shape["num_heads"], shape["head_v"], device=dev)

    def steps(n):
        for t in range(n):
            cache.step(idx, x["q"][t % window], keys[t % window], x["v"][t % window], x["g"][t % window],
                       None if x["beta"] is None else x["beta"][t % window], out=out, validate=False)

    steps(2 * window)   # compile + warm up (the ring counts end where they began: 0)
    if stagger:
        stagger_slots(cache, [idx], x, window)
    _sync(dev)
    if rounds == 0:     # warm-up only: for an outside profiler (ncu), which sees steps 0 .. 2L-1
        if ncu_window and mode == "replay":
            steps(window - 2)   # (staggered: every slot's count moves by L - 2 as well)
            _cuda_profiler(dev, True)
            steps(2)
            _sync(dev)
            _cuda_profiler(dev, False)
        return []
    n = rounds * window
    with profile(activities=[ProfilerActivity.CUDA if dev.type == "cuda" else ProfilerActivity.CPU]) as prof:
        steps(n)
        _sync(dev)
    rows = []
    mode = mode + (" staggered" if stagger else "")
    for e in prof.key_averages():
        if e.count == 0 or (dev.type == "cuda" and e.device_type.name != "CUDA"):   # (CPU smoke: the CPU ops)
            continue
        total = (getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0) if dev.type == "cuda"
                 else e.cpu_time_total)   # (CPU smoke: the interpreted ops' CPU time)
        rows.append(dict(family=family, spec=spec, mode=mode, batch=batch, key_heads=cache.num_key_heads,
                         knobs=cache.knobs.overrides(), kernel=e.key[:60], launches=e.count,
                         total_us=total, us_per_step=total / n, us_per_launch=total / e.count))
    return rows


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _cuda_profiler(dev, start: bool):
    """cudaProfilerStart / Stop (what ``ncu --profile-from-start off`` waits for); nothing off the GPU."""
    if dev.type == "cuda":
        (torch.cuda.profiler.start if start else torch.cuda.profiler.stop)()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="gdn,mamba2,kda")
    p.add_argument("--specs", default="fp32,nvfp4/fp16,nvfp4+sr")
    p.add_argument("--batch", default=None, help="batch sizes, comma list (default 256; --cpu-smoke 2)")
    p.add_argument("--window", type=int, default=None, help="replay window L (default 16; --cpu-smoke 4)")
    p.add_argument("--ring-dtype", choices=tuple(RING_DTYPES), default="float32",
                   help="dtype of the replay rings' k and v (as bench.py --ring-dtype; default float32)")
    p.add_argument("--rounds", type=int, default=4,
                   help="L-step rounds profiled (default 4); 0: only the 2 L warm-up steps, no torch.profiler, no "
                        "table (to run under ncu: the replay step t of a slot group flushes when t %% L == L - 1)")
    p.add_argument("--ncu-window", action="store_true", help="with --rounds 0: profile (cudaProfilerStart / Stop) "
                   "the last non-flush step and the flush step of each replay spec (module docstring)")
    p.add_argument("--stagger", action="store_true", help="also the replay specs with staggered slots (B / L rows "
                   "flush on every step); with --ncu-window: only staggered")
    p.add_argument("--no-conventional", action="store_true", help="skip the conventional fp32 rows")
    p.add_argument("--keys", choices=("shared", "per-head"), default="shared",
                   help="the rings' keys once per key head of the bench shape (shared, as bench.py times them and "
                        "the models have them; the default) or once per value head")
    p.add_argument("--knobs", default="default", help="launcher knobs of every cache, name=value,... "
                   "(kernels.launch.LaunchKnobs; 'default': the heuristics)")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes in the Triton interpreter (TRITON_INTERPRET=1;"
                   " CPU op times, a check that the script runs)")
    a = p.parse_args(argv)
    try:
        knobs = LaunchKnobs(**parse_knobs(a.knobs))
    except ValueError as e:
        p.error(f"--knobs {a.knobs!r}: {e}")
    try:
        batches = [int(b) for b in (a.batch or ("2" if a.cpu_smoke else "256")).split(",")]
    except ValueError:
        p.error(f"--batch {a.batch!r}: a comma list of positive integers")
    a.window = a.window or (4 if a.cpu_smoke else 16)
    if min(batches) < 1 or a.window < 1 or a.rounds < 0:
        p.error("--batch and --window must be positive, --rounds >= 0")
    try:
        families, specs = check_grid(a.families, a.specs)
    except ValueError as e:
        p.error(f"unknown {e}" if str(e).startswith("families") else str(e))
    if a.cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("profile_step.py: --cpu-smoke needs TRITON_INTERPRET=1")
        dev, shapes = torch.device("cpu"), CPU_SMOKE_SHAPES
    elif not torch.cuda.is_available():
        sys.exit("profile_step.py needs a CUDA GPU")
    else:
        dev, shapes = torch.device("cuda"), SHAPES
    os.makedirs(a.out, exist_ok=True)
    rows = []
    kw = dict(shapes=shapes, device=dev, shared_keys=a.keys == "shared", knobs=knobs)
    for b in batches:
        for fam in families:
            if a.rounds and not a.no_conventional:    # (--rounds 0: the replay launches only, for ncu)
                rows += profile_config(fam, "fp32", "conventional", b, a.window, a.rounds, **kw)
            for spec in specs:
                for st in ((True,) if a.ncu_window and a.stagger else (False, True) if a.stagger else (False,)):
                    rows += profile_config(fam, spec, "replay", b, a.window, a.rounds, a.ring_dtype, stagger=st,
                                           ncu_window=a.ncu_window, **kw)
            if rows:
                pd.DataFrame(rows).to_csv(os.path.join(a.out, "profile.partial.csv"), index=False)
    if a.rounds == 0:
        return
    print(write_table(a.out, "profile", f"Per-kernel CUDA time of a decode step (batch {a.batch}, L = {a.window}, "
                      f"{a.rounds} x L steps, torch.profiler; ring k, v in {a.ring_dtype})", pd.DataFrame(rows), dev))
    if os.path.exists(os.path.join(a.out, "profile.partial.csv")):
        os.remove(os.path.join(a.out, "profile.partial.csv"))


if __name__ == "__main__":
    main()
