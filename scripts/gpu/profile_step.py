"""Where a decode step's time goes, per kernel launch (GPU): the CUDA time of each Triton kernel of the step.

For each (family, spec, mode) at one batch: L rounds of the step on one slot group (so every slot goes through
its L - 1 non-flush steps and one flush), timed under torch.profiler (CUDA activity, no CUDA graph: the
per-kernel times are what matters here, launch gaps are not counted). Prints one table (kernel, launches,
total and per-step microseconds) and writes it to ``OUT/profile.md`` / ``.csv``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/profile_step.py --out "$OUT/profile"

Under Nsight Compute (``--rounds 0``: warm-up steps only; the 16th ``_flush_kernel`` launch flushes every row):

    ncu --clock-control none -k regex:_flush_kernel --launch-skip 15 --launch-count 1 --section SpeedOfLight \
        python3 scripts/gpu/profile_step.py --out /tmp/p --families gdn --specs fp32 --rounds 0
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import RING_DTYPES, SHAPES, _fill_states, bench_inputs  # noqa: E402
from replayssm_quant.kernels.bench_report import write_table  # noqa: E402
from replayssm_quant.kernels.state_cache import SSMStateCache  # noqa: E402


def profile_config(family, spec, mode, batch, window, rounds, ring_dtype="float32"):
    shape = SHAPES[family]
    dev = torch.device("cuda")
    cache = SSMStateCache(family, spec, batch, shape["num_heads"], shape["head_k"], shape["head_v"], window=window,
                          mode=mode, device=dev, backend="triton", seed=1, ring_dtype=RING_DTYPES[ring_dtype])
    _fill_states(cache, 7)
    x = bench_inputs(family, batch, shape, window, dev)
    idx = torch.arange(batch, device=dev, dtype=torch.int32)
    out = torch.empty(batch, shape["num_heads"], shape["head_v"], device=dev)

    def steps(n):
        for t in range(n):
            cache.step(idx, x["q"][t % window], x["k"][t % window], x["v"][t % window], x["g"][t % window],
                       None if x["beta"] is None else x["beta"][t % window], out=out, validate=False)

    steps(2 * window)   # compile + warm up
    torch.cuda.synchronize()
    if rounds == 0:     # warm-up only: for an outside profiler (ncu), which sees steps 0 .. 2L-1
        return []
    n = rounds * window
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        steps(n)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if e.device_type.name != "CUDA" or e.count == 0:
            continue
        total = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        rows.append(dict(family=family, spec=spec, mode=mode, batch=batch, kernel=e.key[:60], launches=e.count,
                         total_us=total, us_per_step=total / n, us_per_launch=total / e.count))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="gdn,mamba2,kda")
    p.add_argument("--specs", default="fp32,nvfp4/fp16,nvfp4+sr")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--ring-dtype", choices=tuple(RING_DTYPES), default="float32",
                   help="dtype of the replay rings' k and v (as bench.py --ring-dtype; default float32)")
    p.add_argument("--rounds", type=int, default=4,
                   help="L-step rounds profiled (default 4); 0: only the 2 L warm-up steps, no torch.profiler, no "
                        "table (to run under ncu: the replay step t of a slot group flushes when t %% L == L - 1)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("profile_step.py needs a CUDA GPU")
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for fam in a.families.split(","):
        if a.rounds:    # (--rounds 0: the replay launches only, for ncu)
            rows += profile_config(fam, "fp32", "conventional", a.batch, a.window, a.rounds)
        for spec in a.specs.split(","):
            rows += profile_config(fam, spec, "replay", a.batch, a.window, a.rounds, a.ring_dtype)
    if a.rounds == 0:
        return
    print(write_table(a.out, "profile", f"Per-kernel CUDA time of a decode step (batch {a.batch}, L = {a.window}, "
                      f"{a.rounds} x L steps, torch.profiler; ring k, v in {a.ring_dtype})", pd.DataFrame(rows),
                      torch.device("cuda")))


if __name__ == "__main__":
    main()
