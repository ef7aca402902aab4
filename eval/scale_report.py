"""``reports/kl/scale/README.md`` from the JSON files of ``scripts/gpu/kl_scale.py`` and ``kl_multi_gpu.py``.

Reads every ``kl_scale_<tag>.json`` (one per shape and part: ``<shape>[_L<layers>][_long|_generate|_profile]
[_expseg]``, or renamed with a label, e.g. ``_pos64``: the tag names the run in the tables) and
``kl_multi_gpu_<mode>.json`` of a folder and writes one markdown page: the runs, peak memory per phase,
row-tokens/s of the step and chunked paths against the goal (chunked >= 8x step), the chunked vs step KL
agreement, the long run's wall time against its goal (<= 8 minutes), the profiled units (part ``profile``),
generation tokens/s, and the multi-device runs (placement, caches and graphs on their layer's device, peak memory
per GPU, KL split vs one device)::

    python -m replayssm_quant.eval.scale_report OUT [--out reports/kl/scale]

(keep the JSON and ``.md`` files of the runs beside the page: copy them into ``reports/kl/scale/`` and run it
there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

SPEED_GOAL = 8.0          #: chunked row-tokens/s over step (issue 25)
LONG_GOAL_MIN = 8.0       #: wall minutes of the 16 x 10 x 16384-position run (issue 25)
EXECS = ("step", "chunked", "chunked-all")


def _gib(n) -> float | None:
    return None if n is None else round(n / 2 ** 30, 2)


def _table(rows: list[dict]) -> str:
    return pd.DataFrame(rows).to_markdown(index=False, floatfmt=".4g") if rows else "(none)"


def load_runs(src: Path, prefix: str) -> dict[str, dict]:
    """``{tag: json}`` of ``src/<prefix><tag>.json``, sorted by tag."""
    return {p.stem[len(prefix):]: json.loads(p.read_text()) for p in sorted(Path(src).glob(f"{prefix}*.json"))}


def _run_row(tag: str, r: dict) -> dict:
    layers = r.get("layers")
    return {"run": tag, "shape": r["shape"], "params (B)": round(r["params"] / 1e9, 2),
            "layers": "all" if layers is None else f"{layers} of {r.get('shape_layers')} (cut)",
            "weights": r["dtype"], "device": r.get("gpu", r.get("device")),
            "allocator": r.get("alloc_conf") or "default"}


def _memory_rows(tag: str, r: dict) -> list[dict]:
    out = []
    load = r.get("load_memory", {}).get("load", {})
    out.append({"run": tag, "path": "load", "phase": "load", "peak allocated GiB": _gib(load.get("peak_allocated_bytes")),
                "peak reserved GiB": _gib(load.get("peak_reserved_bytes"))})
    for ex in (*EXECS, "long"):
        mem = r.get(ex, {}).get("memory", {})
        for phase in ("prefill", "decode"):
            p = mem.get(phase)
            if p:
                out.append({"run": tag, "path": ex if ex != "long" else f"long ({r['long']['exec']})", "phase": phase,
                            "peak allocated GiB": _gib(p.get("peak_allocated_bytes")),
                            "peak reserved GiB": _gib(p.get("peak_reserved_bytes"))})
    return out


def _speed_row(tag: str, r: dict) -> dict | None:
    if "step" not in r:
        return None
    row = {"run": tag, "rows": r["step"]["rows"]}
    for ex in EXECS:
        row[f"{ex} row-tokens/s"] = r.get(ex, {}).get("row_tokens_per_s")
    for ex in ("chunked", "chunked-all"):
        ratio = r.get(f"{ex}_over_step")
        row[f"{ex} / step"] = ratio
        row[f"{ex} >= {SPEED_GOAL:g}x"] = None if ratio is None else ("yes" if ratio >= SPEED_GOAL else "no")
    # runs before the throughput part's warm-up timed first-use costs (Triton compiles, graph captures) too
    row["warm-up"] = "yes" if "warmup_seconds" in r["step"] else "no: first-use costs timed"
    return row


def _agreement_rows(tag: str, r: dict) -> list[dict]:
    return [{"run": tag, "variant": v, "mean KL step": a["mean_kl_step"], "mean KL chunked": a["mean_kl_chunked"],
             "max abs dKL chunked": a["max_abs_dkl"], "max abs dKL chunked-all": a["max_abs_dkl_chunked_all"]}
            for v, a in r.get("agreement", {}).items()]


def _long_row(tag: str, r: dict) -> dict | None:
    lg = r.get("long")
    if not lg:
        return None
    # wall_seconds: the whole run in one call (absent when its document batches ran over several calls or it was cut)
    wall = None if lg.get("wall_seconds") is None else lg["wall_seconds"] / 60
    est = lg.get("decode_seconds_all_estimate")
    return {"run": tag, "docs x variants": f"{lg['docs']} x {len(r['variants'])}", "prefill": lg["prefill"],
            "positions": lg["tokens"], "exec": lg["exec"], "row-tokens/s": lg["row_tokens_per_s"],
            "wall min": None if wall is None else round(wall, 2),
            f"<= {LONG_GOAL_MIN:g} min": None if wall is None else ("yes" if wall <= LONG_GOAL_MIN else "no"),
            "batches done": f"{lg.get('batches_done', 1)} of {lg.get('doc_groups', 1)}",
            "decode min, all batches at this rate": None if est is None else round(est / 60, 2)}


def _profile_rows(tag: str, r: dict) -> list[dict]:
    """One row per profiled path (part ``profile``); the kernel time is absent from files written before it was
    recorded."""
    out = []
    for path, p in r.get("profile", {}).items():
        split = p.get("split_per_unit", {})
        out.append({"run": tag, "path": path, "rows": p["rows"], "tokens per unit": p["tokens_per_unit"],
                    "wall ms per unit": round(p["wall_s_per_unit_unprofiled"] * 1e3, 1),
                    "row-tokens/s": p["row_tokens_per_s_unprofiled"],
                    "kernel ms per unit": p.get("kernel_ms_per_unit"),
                    "device events": round(p["device_events_per_unit"]),
                    "launches": round(sum(p.get("launch_calls_per_unit", {}).values())),
                    "host syncs": round(sum(p.get("host_sync_ops_per_unit", {}).values()), 1),
                    "SSM top-level ops": round(sum(split.get(k, {}).get("top_level_ops", 0) for k in
                                                   ("ssm_chunk", "ssm_step", "window_reads", "fill_ring", "flush")))})
    return out


def _generate_rows(tag: str, r: dict) -> list[dict]:
    return [{"run": tag, "state": k, "rows": g["rows"], "tokens": g["tokens"], "seconds": g["seconds"],
             "tokens/s": g["tokens_per_s"]} for k, g in r.get("generate", {}).items()]


def _multi_sections(runs: dict[str, dict]) -> list[str]:
    L = []
    for tag, r in runs.items():
        L += [f"### {tag}: {r['title']}", "", f"Command: `{r['command']}`", ""]
        pl = r.get("placement", {})
        if pl:
            L += ["Placement (accelerate's device map, blocks per device):", "",
                  _table([{"device": d, "blocks": ", ".join(b)} for d, b in pl.items()]), ""]
        chk = r.get("layer_check")
        if chk:
            L += [f"SSM layers whose caches and CUDA graph live on the layer's device: **{chk['ok']} of {chk['layers']}**"
                  + ("" if not chk.get("bad") else f" (not: {chk['bad']})") + f"; graphs captured: {chk['graphs']}.", ""]
            by_dev: dict[str, list[str]] = {}
            for idx, p in chk.get("per_layer", {}).items():
                by_dev.setdefault(p["execution_device"], []).append(
                    str(idx) + ("" if p["parameter_devices"] == [p["execution_device"]] else " (offloaded)"))
            L += ["SSM layers per device (caches, graph): " + "; ".join(
                f"{d}: {', '.join(v)}" for d, v in by_dev.items()), ""]
        rows = []
        for name, run in r.get("runs", {}).items():
            for ex, x in run.get("exec", {}).items():
                mem = x.get("memory", {}).get("decode", {})
                rows.append({"model": name, "exec": ex, "row-tokens/s": x["row_tokens_per_s"],
                             "decode s": x["decode_seconds"],
                             "peak allocated GiB per GPU (decode)": ", ".join(
                                 str(_gib(b)) for b in mem.get("peak_allocated_bytes_per_gpu") or []) or "n/a"})
        if rows:
            L += [_table(rows), ""]
        cmp_ = r.get("kl_compare")
        if cmp_:
            L += [f"KL per position, {cmp_['split']} vs {cmp_['one']}:", "",
                  _table([{"exec": ex, "max abs dKL": d, "within 1e-6": "yes" if d <= 1e-6 else "no"}
                          for ex, d in cmp_["max_abs_dkl"].items()]), ""]
        if r.get("notes"):
            L += [f"- {n}" for n in r["notes"]] + [""]
    return L


def build_scale_report(src, out=None) -> Path:
    """Write ``README.md`` (into ``out``, default ``src``) from the run files in ``src``; returns its path.

    Raises:
        ValueError: ``src`` holds no ``kl_scale_*.json`` / ``kl_multi_gpu_*.json``.
    """
    src = Path(src)
    scale, multi = load_runs(src, "kl_scale_"), load_runs(src, "kl_multi_gpu_")
    if not scale and not multi:
        raise ValueError(f"{src} has no kl_scale_*.json or kl_multi_gpu_*.json (written by scripts/gpu/kl_scale.py "
                         "and kl_multi_gpu.py --out DIR)")
    L = ["# KL harness at real-model scale", "",
         "Random-weight models of released shapes (`scripts/gpu/kl_scale.py`, `scripts/gpu/kl_multi_gpu.py`); "
         f"generated by `python -m replayssm_quant.eval.scale_report` from the runs' JSON files "
         f"({', '.join(sorted(p.name for p in src.glob('kl_*.json')))}).", ""]
    if scale:
        speed = [x for x in (_speed_row(t, r) for t, r in scale.items()) if x]
        longs = [x for x in (_long_row(t, r) for t, r in scale.items()) if x]
        L += ["## Runs", "", _table([_run_row(t, r) for t, r in scale.items()]), "",
              "## Peak memory per phase", "",
              "Allocated: `torch.cuda.max_memory_allocated` within the phase (summed over GPUs); reserved: the caching "
              "allocator's reserve (what nvidia-smi shows, less the CUDA context).", "",
              _table([m for t, r in scale.items() for m in _memory_rows(t, r)]), "",
              f"## Row-tokens/s: step vs chunked (goal: chunked >= {SPEED_GOAL:g}x step)", "", _table(speed), "",
              "## KL agreement, chunked vs step (same tokens, same seed)", "",
              _table([a for t, r in scale.items() for a in _agreement_rows(t, r)]), "",
              f"## Long run (goal: <= {LONG_GOAL_MIN:g} minutes)", "", _table(longs), "",
              "## Profile per unit (part `profile`: a chunked window or one step, after a warm-up)", "",
              "Wall: unprofiled units; the other columns: profiled ones (launches: kernel, graph, memcpy and memset "
              "calls; host syncs: stream / device synchronizations and ops that need one; the regions and op tables "
              "are in the runs' `profile_<shape>.md`).", "",
              _table([p for t, r in scale.items() for p in _profile_rows(t, r)]), "",
              "## Generation tokens/s (the lm-eval plugin, as `downstream` decodes)", "",
              _table([g for t, r in scale.items() for g in _generate_rows(t, r)]), ""]
    if multi:
        L += ["## Models over several devices (accelerate device_map)", ""] + _multi_sections(multi)
    out = Path(out) if out is not None else src
    out.mkdir(parents=True, exist_ok=True)
    path = out / "README.md"
    path.write_text("\n".join(L).rstrip() + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m replayssm_quant.eval.scale_report", description=__doc__.split("\n")[0])
    ap.add_argument("src", help="folder with kl_scale_*.json / kl_multi_gpu_*.json")
    ap.add_argument("--out", default=None, help="write README.md here (default: SRC)")
    args = ap.parse_args(argv)
    try:
        print(f"report: {build_scale_report(args.src, args.out)}")
    except ValueError as e:
        print(f"scale_report: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
