"""Dump the state of a replay cache right before and right after one flush step, fused and split (GPU).

For checking a GPU flush against the CPU torch reference (``kernels.reference``) from the *same* pre-flush
state: ``python3 scripts/gpu/flush_dump.py --out DIR [--family gdn --spec nvfp4+sr --rows 20]`` writes
``DIR/{fused,split}.pt`` (every stored tensor before and after the flush step, the flush step's inputs and
output); ``python3 scripts/gpu/flush_dump.py --compare DIR`` (CPU, Triton not needed) replays the flush step
with the torch reference from each dumped pre-flush state and reports, per stored tensor, the share of
elements that differ from the GPU's.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import SHAPES, parse_knobs  # noqa: E402
from replayssm_quant.kernels.inputs import random_decode_inputs  # noqa: E402
from replayssm_quant.kernels.launch import LaunchKnobs  # noqa: E402
from replayssm_quant.kernels.state_cache import SSMStateCache  # noqa: E402

def _cache(a, rows, backend, device, split=None):
    sh = SHAPES[a.family]
    knobs = parse_knobs(getattr(a, "knobs", "") or "")
    if split is not None:
        knobs["split_flush"] = split
    return SSMStateCache(a.family, a.spec, rows, sh["num_heads"], sh["head_k"], sh["head_v"], window=a.window,
                         device=device, backend=backend, seed=3, knobs=LaunchKnobs(**knobs))


def dump(a):
    dev = torch.device(a.device)
    sh = SHAPES[a.family]
    x = random_decode_inputs(a.family, a.window, a.rows, sh["num_heads"], sh["head_k"], sh["head_v"], device=dev,
                             generator=torch.Generator().manual_seed(99))
    S0 = torch.randn(a.rows, sh["num_heads"], sh["head_v"], sh["head_k"], generator=torch.Generator().manual_seed(98))
    os.makedirs(a.out, exist_ok=True)
    for name, split in (("fused", False), ("split", True)):
        c = _cache(a, a.rows, "triton", dev, split)
        idx = torch.arange(a.rows, device=dev)
        c.load_state(idx, (S0 * 0.3).to(dev))
        beta = (lambda t: None if x["beta"] is None else x["beta"][t])
        for t in range(a.window - 1):
            c.step(idx, x["q"][t], x["k"][t], x["v"][t], x["g"][t], beta(t))
        before = {k: v.clone().cpu() for k, v in c.stored_tensors().items()}
        t = a.window - 1
        o = c.step(idx, x["q"][t], x["k"][t], x["v"][t], x["g"][t], beta(t))
        after = {k: v.clone().cpu() for k, v in c.stored_tensors().items()}
        inputs = {k: (None if x[k] is None else x[k][t].cpu()) for k in ("q", "k", "v", "g", "beta")}
        torch.save(dict(args=vars(a), before=before, after=after, inputs=inputs, out=o.cpu()),
                   os.path.join(a.out, f"{name}.pt"))
        print(name, "dumped")


def compare(a):
    for name in ("fused", "split"):
        d = torch.load(os.path.join(a.compare, f"{name}.pt"))
        for k in ("family", "spec", "window", "knobs"):
            setattr(a, k, d["args"][k])
        rows = d["args"]["rows"]
        c = _cache(a, rows, "torch", torch.device("cpu"))
        for k, v in c.stored_tensors().items():
            v.copy_(d["before"][k])
        i = d["inputs"]
        o = c.step(torch.arange(rows), i["q"], i["k"], i["v"], i["g"], i["beta"])
        rel = ((o - d["out"]).abs().max() / d["out"].abs().max()).item()
        print(f"{name}: flush-step output max rel diff vs reference {rel:.2e}")
        gpu = _cache(a, rows, "torch", torch.device("cpu"))
        for k, v in gpu.stored_tensors().items():
            v.copy_(d["after"][k])
        for k, v in c.stored_tensors().items():
            g = d["after"][k]
            if v.numel():
                print(f"  {k:12s} share of elements differing from the reference: "
                      f"{(v != g).double().mean().item():.2e}")
        for store in ("hp", "lp"):      # the checkpoints as values (the read copy is the same tensors when shared)
            ref, got = getattr(c, store).decode(torch.arange(rows)), getattr(gpu, store).decode(torch.arange(rows))
            print(f"  {store} checkpoint decoded: max |GPU - reference| / max |reference| "
                  f"{((got - ref).abs().max() / ref.abs().max()).item():.2e}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--compare", help="folder of a dump: compare with the CPU torch reference")
    p.add_argument("--family", default="gdn")
    p.add_argument("--spec", default="nvfp4+sr")
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--knobs", default="", help="launcher knobs name=value,... (kernels.bench.LAUNCH_KNOBS)")
    p.add_argument("--device", default="cuda", help="cuda (default); cpu with TRITON_INTERPRET=1 to test this script")
    a = p.parse_args(argv)
    if a.compare:
        compare(a)
    else:
        dump(a)


if __name__ == "__main__":
    main()
