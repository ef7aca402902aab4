"""GPU check and timing of the CUDA-graphed decode step (issue 5, KL throughput).

For each embedded model: the same prefill and teacher-forced steps through a DecodeSession with
``cuda_graphs=False`` (eager: every cache's step launched from Python) and ``cuda_graphs=True``
(one CUDA graph per SSM layer for all specs), asserting the logits are bit-identical at every
step, then the decode throughput of both on the KL harness's shape (11 variants x 16 documents =
176 rows). Prints a table and writes ``OUT/decode_graphs.md`` / ``.csv``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/decode_graph_check.py --out "$OUT"
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import pandas as pd
import torch
import transformers
import triton

from replayssm_quant.eval.adapters.loading import load_model
from replayssm_quant.eval.decode import DecodeSession

KL_VARIANTS = ["fp32", "bf16", "fp16", "fp8+sr", "nvfp4+sr", "nvfp4/fp16", "nvfp4/fp8+sr", "fp8/fp16",
               "conventional:fp16+sr", "conventional:fp8+sr"]


def run(model, variants, tokens, prefill, steps, graphs):
    """Logits of every step [steps, rows, vocab] (or None when timing) and decode seconds."""
    with DecodeSession(model, ["fp32"] + variants, window=16, seed=3, cuda_graphs=graphs) as s:
        s.prefill(tokens[:, :prefill])
        outs = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for t in range(steps):
            lg = s.step(tokens[:, prefill + t])
            outs.append(lg)
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    return torch.stack(outs), secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="gdn-demo,mamba2-demo")
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--steps", type=int, default=256, help="timed steps per mode (default 256)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        lm = load_model(name, device="cuda")
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(32, 127, (args.docs, 512 + args.steps + 1), generator=g).cuda()
        # bit-exactness over 48 steps (3 flushes), small variant set
        small = ["nvfp4+sr", "nvfp4/fp8+sr", "conventional:fp8+sr"]
        a, _ = run(lm.model, small, tokens, 512, 48, graphs=False)
        b, _ = run(lm.model, small, tokens, 512, 48, graphs=True)
        equal = bool(torch.equal(a, b))
        maxdiff = float((a - b).abs().max())
        # throughput on the KL shape (first step of each mode includes graph capture / compile: warm once)
        run(lm.model, KL_VARIANTS, tokens, 512, 4, graphs=True)
        for graphs in (False, True):
            _, secs = run(lm.model, KL_VARIANTS, tokens, 512, args.steps, graphs=graphs)
            n_rows = (len(KL_VARIANTS) + 1) * args.docs
            rows.append(dict(model=name, cuda_graphs=graphs, rows=n_rows, steps=args.steps,
                             ms_per_step=secs * 1e3 / args.steps, row_tokens_per_s=n_rows * args.steps / secs,
                             logits_bit_identical_48_steps=equal, max_abs_diff=maxdiff))
            print(rows[-1], flush=True)
        del lm
        torch.cuda.empty_cache()
        write_table(rows, args)     # after every model: a cut-off run keeps what it measured
    if not all(r["logits_bit_identical_48_steps"] for r in rows):
        raise SystemExit("graphed and eager logits differ")


def write_table(rows, args):
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(args.out, "decode_graphs.csv"), index=False)
    head = (f"# Decode-step CUDA graphs: check and throughput\n\n"
            f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}\n"
            f"- GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, triton {triton.__version__}, "
            f"transformers {transformers.__version__}\n"
            f"- command: `python3 scripts/gpu/decode_graph_check.py --out $OUT --docs {args.docs} --steps {args.steps}`\n"
            f"- rows = (reference fp32 + {len(KL_VARIANTS)} variants) x {args.docs} documents; prefill 512 random "
            "byte tokens; logits compared bit for bit over 48 steps (fp32 reference, nvfp4+sr, nvfp4/fp8+sr, "
            "conventional:fp8+sr)\n\n")
    md = head + df.to_markdown(index=False, floatfmt=".4g") + "\n"
    with open(os.path.join(args.out, "decode_graphs.md"), "w") as f:
        f.write(md)
    print(md, flush=True)


if __name__ == "__main__":
    main()
