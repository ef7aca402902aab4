"""GPU check that launcher knob sets which must not change results (e.g. ``flush_stream``) keep every bit.

For each family x spec: one cache per variant (``kernels.bench.parse_knobs`` syntax, the first is the
baseline; ``--mode`` replay, the default, or conventional), the same slots, states and bf16 inputs; ``--steps``
decode steps captured as one CUDA graph per variant (slot groups staggered so every step mixes flushing and
non-flushing rows, as the benchmark's), then the outputs of every step and every stored tensor (checkpoints,
ring, counters) compared with the baseline's. Prints one line per variant and exits 1 if any differs.
``--shared-keys``: also compare, per family x spec, the baseline with one key per key head (``SSMStateCache``
``num_key_heads`` of the bench shape, where the shape's value heads share keys) against one key per value head
fed the repeated keys: the same outputs and stored tensors, the ring's keys once per key head.

    source scripts/gpu/setup.sh && python3 scripts/gpu/knob_identity_check.py --families gdn,kda \\
        --specs fp32,nvfp4/fp16 --variants "default;flush_stream=0"
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import (SHAPES, bench_inputs, check_grid, parse_knobs,  # noqa: E402
                                           shape_key_group, shape_key_heads, step_keys)
from replayssm_quant.kernels.launch import LaunchKnobs  # noqa: E402
from replayssm_quant.kernels.state_cache import SSMStateCache  # noqa: E402


def run(family, spec, knobs, batch, steps, window=16, mode="replay", shared_keys=False):
    """Outputs ``[steps, B, HV, V]`` and the stored tensors (by name) after ``steps`` graphed steps."""
    sh = SHAPES[family]
    dev = torch.device("cuda")
    c = SSMStateCache(family, spec, batch, sh["num_heads"], sh["head_k"], sh["head_v"], window=window,
                      mode=mode, device=dev, backend="triton", seed=7, knobs=LaunchKnobs(**knobs),
                      num_key_heads=shape_key_heads(sh, shared_keys))
    idx = torch.arange(batch, device=dev, dtype=torch.int32)
    gen = torch.Generator().manual_seed(5)
    c.load_state(idx, torch.randn(batch, sh["num_heads"], sh["head_v"], sh["head_k"], generator=gen).to(dev) * 0.3)
    c.ring_count[:batch] = (torch.arange(batch, dtype=torch.int32, device=dev) % c.window)   # staggered flushes
    x = bench_inputs(family, batch, sh, steps, dev)
    keys = step_keys(c, x)
    outs = torch.empty(steps, batch, sh["num_heads"], sh["head_v"], device=dev)

    def body():
        for t in range(steps):
            c.step(idx, x["q"][t], keys[t], x["v"][t], x["g"][t], None if x["beta"] is None else x["beta"][t],
                   out=outs[t], validate=False)

    saved = [t.clone() for t in c.stored_tensors().values()]
    body()                                       # warm-up (compiles), then restore and replay as a graph
    for t, s in zip(c.stored_tensors().values(), saved):
        t.copy_(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    for t, s in zip(c.stored_tensors().values(), saved):
        t.copy_(s)
    g.replay()
    torch.cuda.synchronize()
    return outs.cpu(), {name: t.cpu() for name, t in c.stored_tensors().items()}


def _report(fam, spec, name, out, st, base_out, base_st) -> bool:
    """Print one variant's line against the baseline; whether its outputs and stored tensors are identical."""
    same_out = torch.equal(out, base_out)
    diff = [n for n, t in st.items() if not torch.equal(t, base_st[n])]
    stored = "identical" if not diff else "DIFFER (" + ", ".join(diff) + ")"
    outs = "identical" if same_out else \
        f"DIFFER (max |diff| / max |out| = {(out - base_out).abs().max() / base_out.abs().max():.1e})"
    print(f"{fam:6s} {spec:12s} {name:30s} outputs {outs}; stored tensors {stored}")
    return same_out and not diff


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default="gdn,mamba2,kda")
    p.add_argument("--specs", default="fp32,nvfp4/fp16,nvfp4+sr")
    p.add_argument("--variants", default="default;flush_stream=0", help="knob sets separated by ';', first = baseline")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--mode", default="replay", choices=("replay", "conventional"))
    p.add_argument("--shared-keys", action="store_true", help="also compare shared keys against a key per value head")
    a = p.parse_args(argv)
    try:   # every argument checked before the first (compiling) run
        families, specs = check_grid(a.families, a.specs)
        variants = [(v.strip(), parse_knobs(v)) for v in a.variants.split(";")]
        for _, knobs in variants:
            LaunchKnobs(**knobs)
    except ValueError as e:
        sys.exit(f"knob_identity_check: {e}")
    if not torch.cuda.is_available():
        sys.exit("knob_identity_check: needs a CUDA device")
    bad = 0
    for fam in families:
        for spec in specs:
            base_out, base_st = run(fam, spec, variants[0][1], a.batch, a.steps, mode=a.mode)
            for name, knobs in variants[1:]:
                bad += not _report(fam, spec, name, *run(fam, spec, knobs, a.batch, a.steps, mode=a.mode), base_out,
                                   base_st)
            hg = shape_key_group(SHAPES[fam])
            if a.shared_keys and hg > 1:
                out, st = run(fam, spec, variants[0][1], a.batch, a.steps, mode=a.mode, shared_keys=True)
                base_st = dict(base_st, ring_k=base_st["ring_k"][:, ::hg])   # the repeated keys' ring, once per group
                bad += not _report(fam, spec, f"shared keys (HK = HV / {hg})", out, st, base_out, base_st)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
