"""fla's decode anchor under Nsight Compute (GPU): the kernel the bench's ``fla fp32`` rows time, between
``cudaProfilerStart`` / ``Stop``, so that ``ncu --profile-from-start off`` sees only those launches.

Runs :func:`replayssm_quant.kernels.bench.bench_fla` (the bench's shapes, inputs and rotated states) once to
compile and warm up, then once more inside the profiler window; give ncu a ``--launch-count`` (the window holds
window x rotation launches: 1024 at batch 1).

    ncu --profile-from-start off -k regex:fused_recurrent --launch-count 4 -o /tmp/fla \\
        python3 scripts/gpu/ncu_fla_anchor.py --family gdn --batch 1
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import FLA_ANCHORS, SHAPES, bench_fla  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="gdn", help=f"one of {', '.join(FLA_ANCHORS)} (default gdn)")
    p.add_argument("--batch", type=int, default=1, help="rows (default 1)")
    p.add_argument("--window", type=int, default=16, help="steps per state of the bench's loop (default 16)")
    a = p.parse_args(argv)
    if a.family not in FLA_ANCHORS:
        p.error(f"--family {a.family!r}: fla anchors exist for {', '.join(FLA_ANCHORS)}")
    if a.batch < 1 or a.window < 1:
        p.error("--batch and --window must be >= 1")
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (fla's Triton kernels; there is no CPU mode)")
    dev = torch.device("cuda")

    def one_pass_then_profiled(steps):   # (bench_fla's timer argument: called once with its step loop)
        steps()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        steps()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return 1.0

    bench_fla(a.batch, SHAPES[a.family], a.window, one_pass_then_profiled, dev, family=a.family)
    print(f"fla {a.family} anchor: batch {a.batch}, one profiled pass of window x rotation launches")


if __name__ == "__main__":
    main()
