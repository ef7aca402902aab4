"""Sweep of launcher knobs (GPU): time decode steps (replay, or ``--mode conventional``) of families x specs at one
batch under several knob sets (and, with ``--ring-dtypes``, ring input dtypes).

Each variant is a set of launcher knobs (``kernels.bench.LAUNCH_KNOBS``: the fields of
``kernels.launch.LaunchKnobs``), written ``name=value,name=value`` (``kernels.bench.parse_knobs``); ``default`` is the
heuristic. ``--ring-dtypes float32,bfloat16`` times each configuration with each ring dtype in turn (interleaved,
column ``ring_dtype``; replay only), and ``--keys shared,per-head`` with the cache's keys once per key head (the
bench shape's ``num_key_heads``) and once per value head in turn (column ``key_heads``). Columns as
``replayssm-quant bench`` (``nonflush_us`` = one of the L - 1 non-flush steps, ``flush_us`` = the flush step,
``time_us`` = per step over L steps with every slot flushing on the same step, ``staggered_us`` = per step over
L steps with the slots' flushes spread over the L steps; phases not asked for are empty). Prints one table and writes
``OUT/<stem>.csv`` / ``.md`` after every measurement (a run cut short keeps what it measured).

    source scripts/gpu/setup.sh && python3 scripts/gpu/launch_sweep.py --out "$OUT/sweep" --families gdn \\
        --specs fp32,nvfp4/fp16 --phases flush --variants "default;flush_stages=2"
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import pandas as pd
import torch
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import (PHASES, RING_DTYPES, SHAPES, Timer, bench_inputs, bench_kernel,  # noqa: E402
                                           check_grid, parse_knobs)
from replayssm_quant.kernels.bench_report import write_table  # noqa: E402
from replayssm_quant.kernels.launch import LaunchKnobs  # noqa: E402


def parse_variant(text: str) -> dict:
    """``"a=1,b=true"`` -> ``{"a": 1, "b": True}``; ``"default"`` -> ``{}`` (:func:`kernels.bench.parse_knobs`)."""
    try:
        knobs = parse_knobs(text)
        LaunchKnobs(**knobs)   # the values checked before any device work
        return knobs
    except ValueError as e:
        raise SystemExit(f"launch_sweep: {e}") from None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="gdn")
    p.add_argument("--specs", default="fp32")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--mode", default="replay", choices=("replay", "conventional"))
    p.add_argument("--rep-ms", type=int, default=20)
    p.add_argument("--phases", default="step,nonflush,flush", help=f"comma list of {', '.join(PHASES)}")
    p.add_argument("--variants", default="default", help="';'-separated knob sets (name=value,...; 'default')")
    p.add_argument("--stem", default="launch_sweep", help="output file stem")
    p.add_argument("--ring-dtypes", default="float32",
                   help=f"comma list of the ring's input dtypes ({', '.join(RING_DTYPES)}), each timed in turn")
    p.add_argument("--keys", default="shared", help="comma list of shared, per-head: the caches' keys once per key "
                                                     "head of the shape (shared) or per value head, each timed in turn")
    a = p.parse_args(argv)
    keys = [x.strip() for x in a.keys.split(",")]
    if set(keys) - {"shared", "per-head"}:
        sys.exit(f"launch_sweep: --keys takes shared, per-head, got {a.keys!r}")
    rings = [r.strip() for r in a.ring_dtypes.split(",")]
    if set(rings) - set(RING_DTYPES):
        sys.exit(f"launch_sweep: --ring-dtypes takes {', '.join(RING_DTYPES)}, got {a.ring_dtypes!r}")
    phases = tuple(x.strip() for x in a.phases.split(","))
    if set(phases) - set(PHASES):
        sys.exit(f"launch_sweep: --phases takes {', '.join(PHASES)}, got {a.phases!r}")
    variants = [(v.strip() or "default", parse_variant(v)) for v in a.variants.split(";")]
    try:
        families, specs = check_grid(a.families, a.specs)
    except ValueError as e:
        sys.exit(f"launch_sweep: {e}")
    if a.batch < 1:
        sys.exit(f"launch_sweep: --batch must be positive, got {a.batch}")
    if not torch.cuda.is_available():
        sys.exit("launch_sweep: needs a CUDA device")
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    timer = Timer(dev, a.rep_ms)
    rows = []
    todo = list(itertools.product(families, specs, variants, rings, keys))
    x, x_family = None, None
    for fam, spec, (name, knobs), ring, key_layout in tqdm(todo, desc="launch sweep"):
        if x_family != fam:   # one family's inputs at a time
            x, x_family = bench_inputs(fam, a.batch, SHAPES[fam], 16, dev), fam
        r = bench_kernel(fam, spec, a.mode, a.batch, SHAPES[fam], 16, timer, dev, x, knobs, phases,
                         ring_dtype=RING_DTYPES[ring], shared_keys=key_layout == "shared")
        rows.append(dict(variant=name, **r))
        pd.DataFrame(rows).to_csv(os.path.join(a.out, f"{a.stem}.csv"), index=False)
    cols = (["family", "spec", "variant"] + (["ring_dtype"] if len(rings) > 1 else [])
            + (["key_heads"] if len(keys) > 1 else [])
            + ["time_us", "staggered_us", "nonflush_us", "flush_us", "block_v", "flush_block_v", "step_advance",
               "num_warps", "nonflush_warps", "nonflush_maxnreg", "nonflush_stages", "flush_item_v", "flush_warps",
               "flush_programs", "maxnreg", "prefetch", "flush_scratch", "flush_nvfp4_items", "flush_nvfp4_item_blocks",
               "flush_dot", "flush_items_dot", "flush_stream", "flush_stages"])
    print(write_table(a.out, a.stem, f"Launcher knob sweep ({a.mode}, batch {a.batch}, L = 16, phases "
                                     f"{', '.join(phases)})",
                      pd.DataFrame(rows), dev, cols))


if __name__ == "__main__":
    main()
