"""GPU check of the split flush's 3xTF32 dots on any replay spec: the recurrence checkpoint's error against the
float64 oracle after each flush, with 3xTF32 and with IEEE dots (``kernels.bench_checks.flush_dot_check``; the
bench itself checks nvfp4/fp16). Prints one table, writes ``OUT/flush_dot_check.csv`` and exits 1 if a row fails
(3xTF32 error above 1.1x the IEEE one + 1e-6).

    source scripts/gpu/setup.sh && python3 scripts/gpu/flush_dot_check.py --out "$OUT/dot" --families gdn,kda,mamba2 \\
        --specs fp8+sr,int8+sr
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import SHAPES  # noqa: E402
from replayssm_quant.kernels.bench_checks import Oracle, flush_dot_check  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--families", default="gdn,kda,mamba2")
    p.add_argument("--specs", default="fp8+sr,int8+sr")
    p.add_argument("--window", type=int, default=16)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("flush_dot_check: needs a CUDA device")
    bad = set(a.families.split(",")) - set(SHAPES)
    if bad:
        sys.exit(f"flush_dot_check: unknown families {sorted(bad)}; allowed {', '.join(SHAPES)}")
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for fam in a.families.split(","):
        oracle = Oracle(fam, SHAPES[fam], a.window, torch.device("cuda"))
        for spec in a.specs.split(","):
            rows.append(flush_dot_check(oracle, spec))
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows).rename(columns={"max_rel_out_err": "ieee_ckpt_err", "max_rel_ckpt_err": "tf32x3_ckpt_err"})
    df.to_csv(os.path.join(a.out, "flush_dot_check.csv"), index=False)
    print(df.to_string(index=False))
    sys.exit(0 if df["ok"].all() else 1)


if __name__ == "__main__":
    main()
