"""Host syncs left in one chunked-all window and one step of a small model (issue 25).

Builds a random-weight model (``--shape``: a tiny config ``tiny-ARCH`` by default, or any shape of
``kl_scale.py``), a :class:`~replayssm_quant.eval.decode.DecodeSession` of the KL harness's 10 variants per path
(``chunked-all``, ``step``), prefills, runs one warm-up unit (Triton compiles, CUDA graph captures), then one unit
(one window of L tokens / one step) under

* on a GPU: ``torch.cuda.set_sync_debug_mode("warn")`` (every synchronizing call warns; each warning is printed
  with the first stack frame in this repository) and ``torch.profiler`` (``cudaStreamSynchronize`` /
  ``cudaDeviceSynchronize`` calls, ``Memcpy HtoD`` device events);
* everywhere (the only check on the CPU): a ``TorchDispatchMode`` counting the aten ops that synchronize or copy
  host data to a GPU (``aten::_local_scalar_dense`` (``.item()``, ``int(t)``), ``nonzero``, ``_unique2``,
  ``is_nonzero`` (``bool(t)``), ``masked_select``, ``lift_fresh`` (``torch.tensor(python value)``)) with the
  repository frame that called each. (A CPU tensor moved ``.to(cuda)`` shows on the GPU only, as a Memcpy HtoD.)

On the CPU set ``TRITON_INTERPRET=1`` to run the Triton backend (the GPU code path) in the interpreter; without it
the flush is the torch reference (``backend="torch"``: its own host syncs, reported but not the GPU path's).
Writes ``OUT/sync_check.json``; prints one line per path and source. Smoke run on the CPU::

    TRITON_INTERPRET=1 python scripts/gpu/sync_check.py --out /tmp/sc --shape tiny-qwen3_5 --docs 1 --prefill 4

On the GPU: ``python3 scripts/gpu/sync_check.py --out "$OUT/sync"`` (exit status 0; the counts are the result).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: aten ops that synchronize with the host or copy host data to a GPU when run on CUDA tensors
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_consecutive",
            "aten::is_nonzero", "aten::masked_select", "aten::lift_fresh")
#: CUDA runtime calls / device events of a host sync or a pageable host-to-device copy
CUDA_SYNC_KEYS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _repo_frame(stack) -> str:
    """The innermost frame of ``stack`` (profiler frames, innermost first, or ``traceback`` frames) inside this
    repository and outside this script: ``path:line (function)``, or the innermost frame at all."""
    frames = [str(f) for f in stack]
    for f in frames:
        if REPO in f and "sync_check.py" not in f and "/site-packages/" not in f:
            return f.replace(REPO + "/", "")
    return frames[0] if frames else "?"


class _SyncOps:
    """A ``TorchDispatchMode`` that counts the aten ops of :data:`SYNC_OPS` by the repository frame calling them
    (frames of the Triton interpreter, which runs kernels on host tensors, left out)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counts: dict[str, int] = {}
        names = {n.split("::")[1] for n in SYNC_OPS}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._schema.name.split("::")[-1]
                if name in names:
                    stack = traceback.format_stack(limit=60)[:-1]
                    if not any("triton/runtime/interpreter" in f for f in stack):
                        key = f"aten::{name} @ {' '.join(_repo_frame(reversed(stack)).split())[:160]}"
                        counts[key] = counts.get(key, 0) + 1
                return func(*args, **(kwargs or {}))

        self.counts, self.mode = counts, Mode()


def _cuda_counts(prof) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in prof.events():
        if e.name in CUDA_SYNC_KEYS or (e.name.startswith("Memcpy HtoD") and "Pageable" in e.name):
            out[e.name] = out.get(e.name, 0) + 1
    return out


def check_path(model, tokens, variants, path: str, window: int, backend: str, device: str) -> dict:
    """One session of ``path`` ("chunked-all" or "step"): prefill, warm-up unit, then one checked unit."""
    from torch.profiler import ProfilerActivity, profile

    from replayssm_quant.eval.decode import DecodeSession
    from replayssm_quant.eval.placement import input_device

    P = tokens.shape[1] - 2 * window - 1
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with DecodeSession(model, variants, window=window, seed=1, backend=backend,
                       exec_mode="step" if path == "step" else path) as s:
        s.prefill(tokens[:, :P])
        toks = tokens.to(input_device(model))
        C = 1 if path == "step" else s.chunk_tokens()

        def unit(i):
            c0 = P + i * C
            return s.feed(toks[:, c0:c0 + C]) if path != "step" else s.step(toks[:, c0])

        unit(0)
        if device == "cuda":
            torch.cuda.synchronize()
        caught: dict[str, int] = {}

        def show(message, category, filename, lineno, file=None, line=None):
            frame = _repo_frame(reversed(traceback.format_stack(limit=40)[:-1]))
            key = f"{str(message).splitlines()[0][:60]} @ {' '.join(frame.split())[:160]}"
            caught[key] = caught.get(key, 0) + 1

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            sync_ops = _SyncOps()
            try:
                with profile(activities=acts) if device == "cuda" else contextlib.nullcontext() as prof:
                    with sync_ops.mode:
                        unit(1)
                    if device == "cuda":
                        torch.cuda.set_sync_debug_mode("default")    # the profiler's own sync below is not counted
                        torch.cuda.synchronize()
            finally:
                if device == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        if device == "cuda":
            torch.cuda.synchronize()
    ops = sync_ops.counts
    return {"path": path, "tokens_per_unit": C, "rows": len(variants) * tokens.shape[0], "backend": backend,
            "sync_debug_warnings": caught, "sync_debug_total": sum(caught.values()),
            "cuda_sync_events": _cuda_counts(prof) if device == "cuda" else {}, "sync_ops": ops, "sync_ops_total": sum(ops.values())}


def main(argv=None):
    from kl_scale import KL_VARIANTS, build, docs_of

    from replayssm_quant.eval.decode import parse_variant
    from replayssm_quant.eval.kl import with_reference
    from replayssm_quant.eval.peak_memory import PhaseMemory

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="tiny-qwen3_5")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--docs", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=32)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"],
                    help="auto: triton on a GPU or under TRITON_INTERPRET=1, else torch")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = args.backend
    if backend == "auto":
        backend = "triton" if device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1" else "torch"
    os.makedirs(args.out, exist_ok=True)
    model, vocab = build(args.shape, getattr(torch, args.dtype), device, PhaseMemory(), args.layers)
    variants = with_reference([parse_variant(v) for v in KL_VARIANTS])
    tokens = docs_of(args.docs, args.prefill + 2 * args.window + 1, vocab, seed=3)
    result = {"shape": args.shape, "device": device, "backend": backend, "dtype": args.dtype, "paths": {}}
    for path in ("chunked-all", "step"):
        r = check_path(model, tokens, variants, path, args.window, backend, device)
        result["paths"][path] = r
        print(f"sync check {path} ({r['rows']} rows, {r['tokens_per_unit']} token(s), backend {backend}): "
              f"{r['sync_ops_total']} sync/host-copy ops, {r['sync_debug_total']} sync-debug warnings, "
              f"CUDA sync events {r['cuda_sync_events'] or 'none'}", flush=True)
        for k, n in sorted(r["sync_ops"].items(), key=lambda x: -x[1]):
            print(f"  {n:5d}  {k}")
        for k, n in sorted(r["sync_debug_warnings"].items(), key=lambda x: -x[1]):
            print(f"  {n:5d}  warn: {k}")
        with open(os.path.join(args.out, "sync_check.json"), "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
