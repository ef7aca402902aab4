"""Sweep of the split step's non-flush launch (GPU): the data behind :func:`kernels.decode.nonflush_config`.

For each family x spec at one batch, times the replay step (split on) with and without the non-flush launch's
read-copy chunk prefetch (``nonflush_prefetch``). Columns as ``replayssm-quant bench`` (``nonflush_us`` = the
L - 1 non-flush steps alone). Prints one table and writes ``OUT/nonflush_sweep.csv`` / ``.md``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/nonflush_sweep.py --out "$OUT/nfsweep" \\
        --families gdn,mamba2,kda --specs fp32,fp16,fp8+sr,nvfp4/fp16

(Until commit 0e4c942 the launch tiled V and the sweep also took ``--block-v`` and early ring loads:
reports/bench/full_0e4c942/nonflush_sweep*.md.)
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
from replayssm_quant.kernels.bench import SHAPES, Timer, bench_inputs, bench_kernel, write_table  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="gdn")
    p.add_argument("--specs", default="fp32,fp16,fp8+sr,nvfp4/fp16")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rep-ms", type=int, default=20)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("nonflush_sweep: needs a CUDA device")
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    timer = Timer(dev, a.rep_ms)
    rows = []
    todo = list(itertools.product(a.families.split(","), a.specs.split(","), (True, False)))
    x, key = None, None
    for fam, spec, pf in tqdm(todo, desc="non-flush sweep"):
        if key != fam:
            x, key = bench_inputs(fam, a.batch, SHAPES[fam], 16, dev), fam
        r = bench_kernel(fam, spec, "replay", a.batch, SHAPES[fam], 16, timer, dev, x,
                         dict(split_flush=True, nonflush_prefetch=pf))
        rows.append(r)
        pd.DataFrame(rows).to_csv(os.path.join(a.out, "nonflush_sweep.csv"), index=False)
    cols = ["family", "spec", "batch", "prefetch", "time_us", "nonflush_us", "flush_us"]
    print(write_table(a.out, "nonflush_sweep", f"Non-flush launch sweep (batch {a.batch}, L = 16)",
                      pd.DataFrame(rows), dev, cols))


if __name__ == "__main__":
    main()
