"""Sweep of the split step's non-flush launch (GPU): the data behind :func:`kernels.decode.nonflush_config`.

For each family x spec at one batch, times the replay step (split on) with and without the non-flush launch's
read-copy chunk prefetch (``nonflush_prefetch``): :mod:`launch_sweep` with those two knob sets, output
``OUT/nonflush_sweep.csv`` / ``.md``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/nonflush_sweep.py --out "$OUT/nfsweep" \\
        --families gdn,mamba2,kda --specs fp32,fp16,fp8+sr,nvfp4/fp16

(Until commit 0e4c942 the launch tiled V and the sweep also took ``--block-v`` and early ring loads:
reports/bench/full_0e4c942/nonflush_sweep*.md.)
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch_sweep  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="gdn")
    p.add_argument("--specs", default="fp32,fp16,fp8+sr,nvfp4/fp16")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rep-ms", type=int, default=20)
    a = p.parse_args(argv)
    launch_sweep.main(["--out", a.out, "--families", a.families, "--specs", a.specs, "--batch", str(a.batch),
                       "--rep-ms", str(a.rep_ms), "--stem", "nonflush_sweep", "--variants",
                       "split_flush=true,nonflush_prefetch=true;split_flush=true,nonflush_prefetch=false"])


if __name__ == "__main__":
    main()
