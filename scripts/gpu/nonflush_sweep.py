"""Sweep of the split step's non-flush launch (GPU): the data behind :func:`kernels.launch.plan_nonflush`.

For each family x spec at one batch, times the replay step (split on) with and without the non-flush launch's
read-copy chunk prefetch (``nonflush_prefetch``): :mod:`launch_sweep` with those two knob sets, output
``OUT/nonflush_sweep.csv`` / ``.md``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/nonflush_sweep.py --out "$OUT/nfsweep" \\
        --families gdn,mamba2,kda --specs fp32,fp16,fp8+sr,nvfp4/fp16

(Until commit 0e4c942 the launch tiled V and the sweep also took ``--block-v`` and early ring loads:
reports/bench/full_0e4c942/nonflush_sweep*.md.)
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch_sweep  # noqa: E402

# launch_sweep arguments; the caller's own (--out, --families, --specs, --batch, --rep-ms) come after and win
FIXED = ["--specs", "fp32,fp16,fp8+sr,nvfp4/fp16", "--stem", "nonflush_sweep", "--variants",
         "split_flush=true,nonflush_prefetch=true;split_flush=true,nonflush_prefetch=false"]


def main(argv=None):
    launch_sweep.main(FIXED + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
