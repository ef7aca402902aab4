"""Do two checkouts' decode kernels compile to the same code? OFFLINE (no GPU): each launch the launcher plans for the
bench shape on an H200 (:func:`ptxas_report.split_launch_kwargs`) is compiled for sm_90 in both trees, and its PTX
compared without the debug sections, line records and comments (they name source lines, which any edit moves).

For a kernel change meant to leave the default plans alone (a path taken only under a knob, a refactor): the same
code means the timings of the tree before stand for the tree after. Prints one row per launch and writes ``--out``
(markdown) when given; exits 1 when any launch differs.

    python scripts/ptx_same_code.py --old /tmp/t_old --families gdn,kda,mamba2 \\
        --specs fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr --launches fused:1,flush:256,nonflush:256

``--old`` (and ``--new``, default this checkout): a checkout's root, e.g. ``git worktree add`` of a commit or
``git archive REV kernels quant replayssm_quant scripts pyproject.toml eval/__init__.py | tar -x -C DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = {"fused": "fused._decode_step_kernel", "flush": "flush._flush_kernel",
           "nonflush": "nonflush._nonflush_kernel"}

# run in a subprocess per tree: ptxas_report imports the tree given by --tree before anything else
_PROBE = """
import hashlib, importlib, json, re, sys
here, tree = sys.argv[1], sys.argv[2]
sys.argv = [here, "--tree", tree]
sys.path.insert(0, here)
import ptxas_report as pr
todo = json.loads(sys.stdin.read())
def code(ptx):
    ptx = re.split(r"\\.section\\s*\\.debug", ptx)[0]
    return "\\n".join(re.sub(r"//.*$", "", l) for l in ptx.splitlines() if ".loc" not in l and ".file" not in l)
for fam, spec, kernel, batch, qual in todo:
    mod, name = qual.split(".")
    fn = getattr(importlib.import_module("replayssm_quant.kernels." + mod), name)
    kw = pr.split_launch_kwargs(fam, spec, batch, kernel)
    ptx = pr.compile_launch(fn, kw, ptx=True)[1]["ptx"]
    print(json.dumps([fam, spec, kernel, batch, hashlib.sha1(code(ptx).encode()).hexdigest()[:12]]), flush=True)
"""


def code_hashes(tree: str, todo: list) -> dict:
    """``{(family, spec, kernel, batch): hash}`` of ``tree``'s compiled launches ``todo``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}   # (the interpreter compiles nothing)
    r = subprocess.run([sys.executable, "-c", _PROBE, HERE, tree], input=json.dumps(todo), capture_output=True,
                       text=True, cwd=tree, env=env)
    if r.returncode:
        sys.exit(f"ptx_same_code: compiling {tree}'s kernels failed:\n{r.stderr[-3000:]}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("[")]
    return {tuple(x[:4]): x[4] for x in rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--old", required=True, help="the checkout to compare against")
    p.add_argument("--new", default=os.path.dirname(HERE), help="the checkout compared (default: this one)")
    p.add_argument("--families", default="gdn,kda,mamba2")
    p.add_argument("--specs", default="fp32,nvfp4/fp16,nvfp4/fp8+sr,fp8+sr,int8+sr")
    p.add_argument("--launches", default="fused:1,flush:256,nonflush:256",
                   help=f"comma list of KERNEL:BATCH, KERNEL one of {', '.join(KERNELS)} (fused: a small batch)")
    p.add_argument("--out", default=None, help="markdown file for the table")
    a = p.parse_args(argv)
    launches = []
    for item in a.launches.split(","):
        kernel, _, batch = item.partition(":")
        if kernel not in KERNELS or not batch.isdigit() or int(batch) < 1:
            p.error(f"--launches {item!r}: KERNEL:BATCH with KERNEL one of {', '.join(KERNELS)}, BATCH >= 1")
        launches.append((kernel, int(batch)))
    for tree in (a.old, a.new):
        if not os.path.isfile(os.path.join(tree, "replayssm_quant", "__init__.py")):
            p.error(f"{tree}: not a replayssm-quant checkout (no replayssm_quant/__init__.py)")
    todo = [[f, s, k, b, KERNELS[k]] for f in a.families.split(",") for s in a.specs.split(",") for k, b in launches]
    old, new = code_hashes(os.path.abspath(a.old), todo), code_hashes(os.path.abspath(a.new), todo)
    lines = ["| family | spec | launch | batch | old | new | same code |", "|---|---|---|---|---|---|---|"]
    for key in old:
        lines.append(f"| {' | '.join(map(str, key))} | {old[key]} | {new.get(key)} | {old[key] == new.get(key)} |")
    same = sum(old[k] == new.get(k) for k in old)
    lines.append(f"\n{same} of {len(old)} launches compile to the same code.")
    text = "\n".join(lines)
    print(text)
    if a.out:
        command = " ".join(argv if argv is not None else sys.argv[1:])
        with open(a.out, "w") as f:
            f.write(f"# Compiled code, `{os.path.abspath(a.old)}` against `{os.path.abspath(a.new)}` (sm_90, "
                    f"offline)\n\n- command: `python scripts/ptx_same_code.py {command}`\n\n{text}\n")
    return 0 if same == len(old) else 1


if __name__ == "__main__":
    sys.exit(main())
