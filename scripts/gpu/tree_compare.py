"""Compare two source trees on the GPU in one device call: the benchmark's key rows, the device checks, and the bits.

For the old tree (``--old DIR``: an export of an earlier commit, e.g. ``mkdir -p .old && git archive 5ac1e64 quant
kernels replayssm_quant scripts pyproject.toml eval/__init__.py | tar -x -C .old``) and this one, each importable on
its own (a package folder per tree, as ``setup.sh`` builds it):

1. ``scripts/gpu/bench.py`` of that tree: fp32 and nvfp4/fp16 (replay; fp32 also conventional) at batch 1 and 256
   for gdn, mamba2 and kda, with the device correctness checks (``correctness.csv``) -> ``OUT/<tree>/bench/``;
2. a fixed decode run per family x spec x mode x batch (this script, ``--dump``: eager steps from seeded states with
   staggered ring positions, so fused and split launches, flush and non-flush rows and the nvfp4 sub-block items
   all run) whose outputs and stored tensors are hashed -> ``OUT/<tree>/hashes.json``.

Then ``OUT/compare.md`` (also printed): per bench row the old and new time and their ratio, the device checks of
both, and every hash pair (equal = the same bits). Usage, from this tree's root on the GPU machine (carry
``.old``)::

    source scripts/gpu/setup.sh && python3 scripts/gpu/tree_compare.py --old .old --out $OUT

``--families`` / ``--specs`` / ``--batches`` replace the bench's rows and the hashed runs (replay for every spec,
conventional too for fp32; batches: the bench's); ``--no-bench`` hashes only (a change that must keep the bits).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NEW_ROOT = os.path.dirname(os.path.dirname(HERE))
FAMILIES, SPECS, BENCH_BATCHES = "gdn,mamba2,kda", "fp32,nvfp4/fp16", "1,256"
DUMP_BATCHES = (1, 16, 256)   # the hashed runs' batches unless --batches is given


def site_for(root: str, name: str) -> str:
    """A folder that makes ``root``'s package importable as ``replayssm_quant`` (as ``setup.sh`` does)."""
    site = f"/tmp/rq_site_{name}"
    shutil.rmtree(site, ignore_errors=True)
    shutil.copytree(os.path.join(root, "replayssm_quant"), os.path.join(site, "replayssm_quant"))
    for d in ("quant", "kernels", "eval"):
        if os.path.isdir(os.path.join(root, d)):
            os.symlink(os.path.abspath(os.path.join(root, d)), os.path.join(site, "replayssm_quant", d))
    return site


SMOKE_BENCH_ARGS = ["--cpu-smoke", "--families", "gdn", "--specs", "fp32", "--batches", "1", "--window", "2"]


def dump_configs(specs) -> list[tuple[str, str]]:
    """The hashed runs' (spec, mode): replay for every spec, and conventional for fp32."""
    return [(s, "replay") for s in specs] + [("fp32", "conventional")] * ("fp32" in specs)


def run_tree(root: str, name: str, out: str, rep_ms: int, smoke: bool = False, families: str = FAMILIES,
             specs: str = SPECS, batches: str | None = None, bench_too: bool = True, keys: str = "shared") -> None:
    """Bench and hash one tree (``smoke``: a tiny CPU run in the interpreter, to check this script's plumbing;
    ``batches``: the bench's and the hashed runs', None: :data:`BENCH_BATCHES` and :data:`DUMP_BATCHES`; ``keys``:
    the hashed runs' ring keys, :func:`dump`)."""
    others = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and not p.rstrip("/").endswith("rq_site")]
    env = dict(os.environ, PYTHONPATH=":".join([site_for(root, name)] + others), PYTHONUNBUFFERED="1")
    os.makedirs(os.path.join(out, name), exist_ok=True)
    bench_args = ["--families", families, "--specs", specs, "--batches", batches or BENCH_BATCHES]
    bench = [sys.executable, os.path.join(root, "scripts", "gpu", "bench.py"), "--out",
             os.path.join(out, name, "bench"), "--rep-ms", str(rep_ms), *(SMOKE_BENCH_ARGS if smoke else bench_args)]
    dump = [sys.executable, os.path.abspath(__file__), "--dump", os.path.join(out, name, "hashes.json"),
            "--families", families, "--specs", specs, "--keys", keys] + (["--batches", batches] if batches else [])
    dump += ["--smoke"] if smoke else []
    for cmd in ([bench] if bench_too else []) + [dump]:
        print(f"[{name}] {' '.join(cmd)}", flush=True)
        subprocess.run(cmd, cwd=root, env=env, check=True)


def _digest(t) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().view(-1).view(dtype=__import__("torch").uint8)
                          .numpy().tobytes()).hexdigest()[:16]


def dump(path: str, device: str = "cuda", shapes=None, batches=DUMP_BATCHES, specs=SPECS.split(","),
         shared_keys: bool = True) -> dict:
    """Hash the outputs and stored tensors of a fixed decode run per configuration (:func:`dump_configs` of
    ``specs``; the tree on ``sys.path``; ``shapes``: the benchmark's by default). ``shared_keys``: where a shape's
    value heads share keys (``num_key_heads`` below ``num_heads``; a tree before 2026-12-06g has no such shapes)
    the caches keep one ring key per key head, as the benchmark times them, and the configuration's name ends in
    ``HK=<key heads>``; False: a key per value head, the names of older trees' hashes."""
    import torch

    from replayssm_quant.kernels import SSMStateCache
    from replayssm_quant.kernels.bench import SHAPES, bench_inputs

    dev, L, res = torch.device(device), 16, {}
    for fam, sh in (shapes or SHAPES).items():
        for spec, mode in dump_configs(specs):
            for B in batches:
                hk = sh.get("num_key_heads", sh["num_heads"]) if shared_keys else sh["num_heads"]
                kw = dict(num_key_heads=hk) if hk < sh["num_heads"] else {}
                c = SSMStateCache(fam, spec, B, sh["num_heads"], sh["head_k"], sh["head_v"], window=L, mode=mode,
                                  device=dev, backend="triton", seed=5, **kw)
                idx = torch.arange(B, device=dev, dtype=torch.int32)
                g = torch.Generator(device=dev).manual_seed(B)
                c.load_state(idx, torch.randn(B, sh["num_heads"], sh["head_v"], sh["head_k"], device=dev,
                                              generator=g) * 0.3)
                c.ring_count[:B] = torch.arange(B, device=dev, dtype=torch.int32) % c.window   # staggered rings
                x = bench_inputs(fam, B, sh, L + 2, dev)
                keys = x["k_heads"] if kw else x["k"]
                h = hashlib.sha256()
                for t in range(L + 2):
                    o = c.step(idx, x["q"][t], keys[t], x["v"][t], x["g"][t],
                               None if x["beta"] is None else x["beta"][t], validate=False)
                    h.update(_digest(o).encode())
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                key = f"{fam} {spec} {mode} B={B}" + (f" HK={hk}" if kw else "")
                res[key] = dict(outputs=h.hexdigest()[:16],
                                **{n: _digest(t) for n, t in c.stored_tensors().items()})
                print(key, res[key]["outputs"], flush=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    return res


def compare(out: str, bench_too: bool = True) -> str:
    import pandas as pd

    lines = ["# Old tree vs this tree (scripts/gpu/tree_compare.py)", ""]
    if bench_too:
        lines += _compare_bench(out)
    lines += _compare_bits(out)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "compare.md"), "w") as f:
        f.write(text)
    return text


def _compare_bench(out: str) -> list[str]:
    import pandas as pd

    lines = []
    dfs = {n: pd.read_csv(os.path.join(out, n, "bench", "results.csv")) for n in ("old", "new")}
    key = ["family", "spec", "mode", "batch"]
    m = dfs["old"].merge(dfs["new"], on=key, suffixes=("_old", "_new"))
    lines += ["| family | spec | mode | batch | old us | new us | new/old | old staggered | new staggered |",
              "|---|---|---|---|---|---|---|---|---|"]
    for _, r in m.iterrows():
        lines.append(f"| {r.family} | {r.spec} | {r['mode']} | {r.batch} | {r.time_us_old:.1f} | {r.time_us_new:.1f} | "
                     f"{r.time_us_new / r.time_us_old:.3f} | {r.staggered_us_old:.1f} | {r.staggered_us_new:.1f} |")
    ratio = (m.time_us_new / m.time_us_old)
    lines += ["", f"median new/old {ratio.median():.3f}, min {ratio.min():.3f}, max {ratio.max():.3f} "
              f"({len(m)} rows)", ""]
    for n in ("old", "new"):
        c = pd.read_csv(os.path.join(out, n, "bench", "correctness.csv"))
        lines.append(f"- device checks, {n} tree: {int(c.ok.sum())} of {len(c)} ok")
    return lines


def _compare_bits(out: str) -> list[str]:
    hs = {n: json.load(open(os.path.join(out, n, "hashes.json"))) for n in ("old", "new")}
    diff = [(k, f) for k in hs["old"] for f in hs["old"][k] if hs["new"].get(k, {}).get(f) != hs["old"][k][f]]
    missing = sorted(set(hs["old"]) ^ set(hs["new"]))
    return [f"- bits: {len(hs['old'])} configurations ({', '.join(hs['old'])}) x "
            f"{len(next(iter(hs['old'].values())))} hashes (outputs over 18 steps and every stored tensor): "
            f"{len(diff)} differ" + ("".join(f"\n  - {k}: {f}" for k, f in diff[:40]))
            + (f"\n- configurations in one tree only: {missing}" if missing else "")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", help="root of the old tree (quant/, kernels/, replayssm_quant/, scripts/)")
    p.add_argument("--out", help="output folder")
    p.add_argument("--rep-ms", type=int, default=20)
    p.add_argument("--families", default=FAMILIES)
    p.add_argument("--specs", default=SPECS, help="the bench's specs and the hashed runs' (default %(default)s)")
    p.add_argument("--batches", default=None, help=f"the bench's and the hashed runs' batches (default {BENCH_BATCHES} "
                   f"and {','.join(map(str, DUMP_BATCHES))})")
    p.add_argument("--no-bench", action="store_true", help="hash only: no bench, no timings")
    p.add_argument("--keys", choices=("shared", "per-head"), default="shared",
                   help="the hashed runs' ring keys: once per key head where the bench shape's value heads share "
                        "keys (shared, the default, as bench.py times them) or once per value head (per-head: what "
                        "a tree before 2026-12-06g can run, to compare its bits with this one's)")
    p.add_argument("--dump", help=argparse.SUPPRESS)   # internal: hash one tree's run into this file
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)   # CPU interpreter, tiny: plumbing test
    a = p.parse_args(argv)
    if a.dump:
        specs = a.specs.split(",")
        if a.smoke:
            return dump(a.dump, "cpu", {"gdn": dict(num_heads=2, num_key_heads=1, head_k=16, head_v=16)}, (2,), specs,
                        a.keys == "shared")
        from replayssm_quant.kernels.bench import SHAPES
        unknown = set(a.families.split(",")) - set(SHAPES)
        if unknown:
            sys.exit(f"tree_compare: unknown families {sorted(unknown)}; allowed {', '.join(SHAPES)}")
        return dump(a.dump, shapes={f: SHAPES[f] for f in a.families.split(",")},
                    batches=tuple(map(int, a.batches.split(","))) if a.batches else DUMP_BATCHES, specs=specs,
                    shared_keys=a.keys == "shared")
    if not a.old or not a.out or not all(os.path.isfile(os.path.join(a.old, d, "__init__.py"))
                                         for d in ("quant", "kernels", "eval")):
        sys.exit("tree_compare: --old DIR (an exported tree: quant/, kernels/, eval/__init__.py, replayssm_quant/, "
                 "scripts/, pyproject.toml; see --help) and --out DIR are required")
    for name, root in (("old", os.path.abspath(a.old)), ("new", NEW_ROOT)):   # run_tree changes cwd
        run_tree(root, name, a.out, a.rep_ms, a.smoke, a.families, a.specs, a.batches, not a.no_bench, a.keys)
    print(compare(a.out, not a.no_bench))


if __name__ == "__main__":
    main()
