"""Downstream accuracy by generation-length quartile (DESIGN.md sec. 6).

Two jobs live here:

* the **quartile analysis** (pure pandas, no model): every sample gets the
  generation length (tokens generated) of its fp32 reference run, samples are
  split into four equal-count length quartiles per (model, task), and each
  run's accuracy per quartile is compared with the fp32 reference in
  percentage points;
* the **runner**: for each model and each run (the fp32 reference plus every
  ``--state`` spec) it calls ``lm_eval.simple_evaluate`` with the ``replayssm``
  plugin and ``log_samples=True``, and saves one samples file per run as soon
  as it completes, so a rerun skips finished runs (resume).

Run names: a spec string (``nvfp4/fp8+sr``, replay mode, window from
``--window``) or ``conventional:SPEC`` (``conventional:fp8+sr``, the state
rounded every step). ``fp32`` is the reference and always runs first.

Samples table (one row per sample and run), the analysis input:

    model: str, task: str, doc_id: int, run: str, correct: float in [0, 1],
    gen_tokens: int (tokens this run generated for the sample)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

REFERENCE = "fp32"
QUARTILES = ("Q1", "Q2", "Q3", "Q4")
SAMPLE_COLUMNS = ("model", "task", "doc_id", "run", "correct", "gen_tokens")
#: token budget of one decode batch (the plugin's model_arg max_batch_tokens; the same value as
#: lm_eval_plugin.DEFAULT_MAX_BATCH_TOKENS, kept here so the command line needs no lm-eval import)
DEFAULT_MAX_BATCH_TOKENS = 65536


# --------------------------------------------------------------------------- run names


def parse_run(text: str, default_mode: str = "replay"):
    """Parse a run name ``[MODE:]SPEC`` into a :class:`~.decode.Variant` (the KL harness's syntax).

    The variant's ``label`` (``nvfp4/fp8+sr``, ``conventional:fp8+sr``) names the run in tables;
    its ``slug`` names its files.

    Raises:
        ValueError: naming the bad part (bad mode, bad spec, separate spec in
            conventional mode) and the valid forms.
    """
    from .decode import parse_variant

    return parse_variant(text, default_mode)


def plan_runs(texts: list[str], default_mode: str = "replay") -> list:
    """The fp32 replay reference followed by the parsed ``texts`` (duplicates dropped, order kept)."""
    runs = [parse_run(REFERENCE)]
    for t in texts:
        r = parse_run(t, default_mode)
        if r.label not in [x.label for x in runs]:
            runs.append(r)
    return runs


# --------------------------------------------------------------------------- analysis


def _check_samples(df) -> None:
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"samples table lacks columns {missing}; needs {list(SAMPLE_COLUMNS)}")
    dup = df.duplicated(["model", "task", "doc_id", "run"])
    if dup.any():
        row = df[dup].iloc[0]
        raise ValueError(
            f"samples table has duplicate rows for model={row.model!r} task={row.task!r} "
            f"doc_id={row.doc_id!r} run={row.run!r}")


def assign_quartiles(lengths):
    """Equal-count length quartiles within each (model, task).

    Args:
        lengths: DataFrame with columns model, task, doc_id, gen_tokens (the
            reference run's lengths), one row per sample.

    Returns:
        the same rows plus ``quartile`` (str Q1..Q4, Q1 = shortest). Samples are
        ordered by (gen_tokens, doc_id) and sample i of n goes to quartile
        ``floor(4 i / n)``, so quartiles differ in size by at most one and ties
        are broken by doc_id (deterministic).
    """
    import numpy as np

    out = lengths.sort_values(["model", "task", "gen_tokens", "doc_id"], kind="mergesort").copy()
    pos = out.groupby(["model", "task"]).cumcount().to_numpy()
    n = out.groupby(["model", "task"])["doc_id"].transform("size").to_numpy()
    out["quartile"] = np.array(QUARTILES)[(4 * pos) // n]
    return out.sort_index()


def quartile_table(samples, reference: str = REFERENCE):
    """Accuracy per generation-length quartile and its change from the reference.

    Args:
        samples: DataFrame with :data:`SAMPLE_COLUMNS`. Every (model, task,
            doc_id) of the reference run must appear in every other run of that
            model and vice versa.
        reference: the run whose generation lengths define the quartiles and
            against which changes are measured.

    Returns:
        DataFrame, one row per (model, task, quartile, run) including the
        reference, with columns model, task, quartile (Q1..Q4 and ``all``),
        run, n, len_min, len_max (reference tokens generated), accuracy (%),
        delta_pp (accuracy - reference accuracy, percentage points). Rows for
        task ``all`` pool every task of the model (each sample keeps the
        quartile of its own task).
    """
    import pandas as pd

    _check_samples(samples)
    df = samples.copy()
    df["correct"] = df["correct"].astype(float)
    ref = df[df["run"] == reference]
    if ref.empty:
        raise ValueError(f"no samples of the reference run {reference!r}; runs present: "
                         f"{sorted(df['run'].unique())}")
    key = ["model", "task", "doc_id"]
    ref_keys = set(map(tuple, ref[key].itertuples(index=False)))
    for (model, run), g in df.groupby(["model", "run"]):
        keys = set(map(tuple, g[key].itertuples(index=False)))
        ref_m = {k for k in ref_keys if k[0] == model}
        if keys != ref_m:
            miss, extra = sorted(ref_m - keys)[:3], sorted(keys - ref_m)[:3]
            raise ValueError(
                f"run {run!r} of model {model!r} does not cover the same samples as the reference "
                f"{reference!r}: missing {miss}, extra {extra} (first 3 shown)")
    q = assign_quartiles(ref[key + ["gen_tokens"]]).rename(columns={"gen_tokens": "ref_tokens"})
    df = df.merge(q, on=key, how="inner")
    df_all = df.assign(task="all")
    both = pd.concat([df, df_all, df.assign(quartile="all"), df_all.assign(quartile="all")])
    agg = (both.groupby(["model", "task", "quartile", "run"], sort=False)
           .agg(n=("correct", "size"), len_min=("ref_tokens", "min"), len_max=("ref_tokens", "max"),
                accuracy=("correct", "mean"))
           .reset_index())
    agg["accuracy"] *= 100.0
    ref_acc = agg[agg["run"] == reference].set_index(["model", "task", "quartile"])["accuracy"]
    agg["delta_pp"] = agg["accuracy"] - ref_acc.reindex(
        pd.MultiIndex.from_frame(agg[["model", "task", "quartile"]])).to_numpy()
    run_order = list(dict.fromkeys([reference] + list(df["run"].unique())))
    agg["_r"] = agg["run"].map(run_order.index)
    tasks = sorted(t for t in agg["task"].unique() if t != "all") + ["all"]
    agg["_t"] = agg["task"].map(tasks.index)
    agg["_q"] = agg["quartile"].map(list(QUARTILES + ("all",)).index)
    agg = agg.sort_values(["model", "_t", "_q", "_r"]).drop(columns=["_r", "_t", "_q"])
    return agg.reset_index(drop=True)


def delta_pivot(table, task: str = "all", reference: str = REFERENCE):
    """Change from the reference in pp: rows (model, run), columns Q1..Q4 and all (one task)."""
    t = table[(table["task"] == task) & (table["run"] != reference)]
    p = t.pivot_table(index=["model", "run"], columns="quartile", values="delta_pp", sort=False)
    return p[[c for c in QUARTILES + ("all",) if c in p.columns]]


# --------------------------------------------------------------------------- samples from lm-eval


def _metric_value(sample: dict, metric: str) -> float:
    if metric not in sample:
        have = [k for k, v in sample.items() if isinstance(v, (int, float)) and k != "doc_id"]
        raise ValueError(f"lm-eval sample has no metric {metric!r}; numeric fields: {have}")
    return float(sample[metric])


def samples_from_lm_eval(model: str, run: str, lm_samples: dict, generation_log: list,
                         metric: str = "exact_match") -> list[dict]:
    """Rows of the samples table from ``simple_evaluate(..., log_samples=True)["samples"]``.

    Args:
        lm_samples: task name -> list of lm-eval sample dicts (doc_id, arguments, metric).
        generation_log: the plugin's :attr:`ReplaySSMLM.generation_log` for this
            evaluation: dicts with ``context`` (str) and ``gen_tokens`` (int),
            one per generate_until request. A sample's context is the first
            argument of its (single) request; equal contexts of a deterministic
            run generate the same tokens, so the lookup by context is exact.

    Returns:
        list of dicts with :data:`SAMPLE_COLUMNS` plus ``response`` (the filtered generation; the
        target stays in the task data, keyed by task and doc_id).
    """
    by_ctx: dict[str, int] = {}
    for rec in generation_log:
        by_ctx.setdefault(rec["context"], int(rec["gen_tokens"]))
    rows = []
    for task, samples in lm_samples.items():
        for s in samples:
            args = s.get("arguments")
            ctx = _request_context(args)
            if ctx not in by_ctx:
                raise ValueError(
                    f"task {task!r} doc {s.get('doc_id')}: no generate_until request with this context "
                    "in the plugin's generation log (is the task output_type generate_until?)")
            resp = s.get("filtered_resps", s.get("resps"))
            while isinstance(resp, list) and resp:
                resp = resp[0]
            rows.append({"model": model, "task": task, "doc_id": int(s["doc_id"]), "run": run,
                         "correct": _metric_value(s, metric), "gen_tokens": by_ctx[ctx],
                         "response": resp if isinstance(resp, str) else str(resp)})
    return rows


def _request_context(args) -> str:
    """The context string of a logged request's arguments (lm-eval 0.4 logs several shapes)."""
    if isinstance(args, dict):  # {"gen_args_0": {"arg_0": ctx, "arg_1": kwargs}}
        first = next(iter(args.values()))
        return first["arg_0"] if isinstance(first, dict) else first
    while isinstance(args, (list, tuple)) and args and not isinstance(args[0], str):
        args = args[0]
    if isinstance(args, (list, tuple)) and args:
        return args[0]
    raise ValueError(f"cannot read the request context from logged arguments {args!r}")


# --------------------------------------------------------------------------- packaged tasks

#: the packaged lm-eval task definitions (lm-eval's TaskManager scans it by itself once the plugin or
#: the installed .pth hook is loaded; see replayssm_quant/_lm_eval_autoregister.py)
TASKS_DIR = Path(__file__).resolve().parent / "tasks"
#: lm-eval tag selecting every packaged synthetic task
SYNTH_TAG = "replayssm_synth"
#: evaluation instances per synthetic task in the packaged data
SYNTH_DOCS_PER_TASK = 64
#: the tag of the tasks that need the recurrent state (the -long models): counting and key-value recall
LONG_TAG = "replayssm_long"


def write_synthetic_task_files(folder: Path = TASKS_DIR, per_task: int = SYNTH_DOCS_PER_TASK) -> list[Path]:
    """Write ``synth_<task>.jsonl`` for every synthetic task: the held-out instances.

    copy/upper: ``synthetic_tasks.heldout_tasks(per_task * len(TASKS))`` (seed HELDOUT_SEED), split by
    task; count: ``heldout_count_tasks(per_task)``; recall: ``heldout_recall_tasks(per_task)`` (their own
    held-out seeds; none is ever trained on). Each line holds prompt, target, task, gen_len (target
    bytes = tokens to generate) and doc_id, plus distance (recall) or start/end (count).
    """
    from replayssm_quant.eval import synthetic_tasks as st

    folder = Path(folder)
    docs = st.heldout_tasks(per_task * len(st.TASKS))
    sets = {task: [d for d in docs if d["task"] == task] for task in st.TASKS}
    sets[st.COUNT_TASK] = st.heldout_count_tasks(per_task)
    sets[st.RECALL_TASK] = st.heldout_recall_tasks(per_task)
    extra = {st.COUNT_TASK: ("start", "end"), st.RECALL_TASK: ("distance",)}
    paths = []
    for task, rows in sets.items():
        path = folder / f"synth_{task}.jsonl"
        keys = ("task", "prompt", "target", "gen_len") + extra.get(task, ())
        with open(path, "w") as f:
            for i, d in enumerate(rows):
                f.write(json.dumps({"doc_id": i, **{k: d[k] for k in keys}}) + "\n")
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- results folder


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def model_label(pretrained: str) -> str:
    """A short file-safe model label: the embedded name, or the folder/repo base name."""
    base = pretrained.rstrip("/").split("/")[-1] or pretrained
    return _SAFE.sub("_", base)


def run_file(out: Path, model: str, run) -> Path:
    """Where a finished run's (a :class:`~.decode.Variant`) samples live: ``OUT/runs/MODEL/SLUG.jsonl``."""
    return Path(out) / "runs" / model / f"{run.slug}.jsonl"


def write_rows_atomic(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` as JSON lines to ``path`` via a temporary file and rename (no half files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def load_samples(out: Path):
    """Every finished run under ``OUT/runs`` as one samples DataFrame (see module doc)."""
    import pandas as pd

    files = sorted((Path(out) / "runs").glob("*/*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no finished runs under {Path(out) / 'runs'} (run `replayssm-quant downstream` first)")
    frames = []
    for f in files:
        df = pd.read_json(f, lines=True, dtype={"run": str, "task": str, "model": str})
        for run in df["run"].unique():
            slug = parse_run(run).slug
            if slug != f.stem:
                raise ValueError(f"{f} holds run {run!r}, whose file is {slug}.jsonl: a stale or renamed "
                                 "file; remove it (or rename it) and rerun")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def check_config(out: Path, config: dict) -> None:
    """Record the run configuration in ``OUT/config.json``, or check it matches the recorded one.

    A rerun into the same folder resumes only when everything that changes
    the samples (tasks, limit, window, seed, generation length, ...) is equal;
    otherwise it is an error naming the differing keys.
    """
    path = Path(out) / "config.json"
    if path.exists():
        old = json.loads(path.read_text())
        diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
        if diff:
            raise ValueError(
                f"{out} holds results of a different configuration (differs in: "
                + ", ".join(f"{k}: {old.get(k)!r} -> {config.get(k)!r}" for k in diff)
                + "); use another --out folder or delete it")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2, sort_keys=True))


# --------------------------------------------------------------------------- runner


def task_manager(include_path: list[str] | None = None):
    """lm-eval TaskManager over its own tasks plus the packaged ones (and any ``include_path``)."""
    from lm_eval.tasks import TaskManager

    paths = [str(TASKS_DIR)] + [str(p) for p in (include_path or [])]
    return TaskManager(include_path=paths if len(paths) > 1 else paths[0])


def run_config(tasks, limit, window, seed, batch_size, gen_kwargs, num_fewshot, metric, filter_name,
               max_batch_tokens: int | None = None, dtype: str = "auto") -> dict:
    """Everything that changes the samples of a run (recorded in OUT/config.json for resume).

    The batching (batch_size, max_batch_tokens) is part of it: stochastic-rounding draws are keyed by
    a row's slot in its batch. No budget is recorded as ``max_batch_tokens: null``, which is also what
    a folder written before the budget existed reads as (resume it with ``--max-batch-tokens 0``).
    """
    return {"tasks": list(tasks), "limit": limit, "window": window, "seed": seed, "batch_size": batch_size,
            "max_batch_tokens": max_batch_tokens or None, "gen_kwargs": gen_kwargs, "num_fewshot": num_fewshot,
            "metric": metric, "filter": filter_name, "dtype": dtype}


def select_filter(lm_samples: dict, filter_name: str | None) -> tuple[dict, dict]:
    """Keep one lm-eval filter's samples per task (tasks like gsm8k log one sample per filter).

    Returns ``(samples per task, chosen filter per task)``: ``filter_name`` when
    given (an error naming the available ones if a task lacks it), else the
    first filter of the task.
    """
    out, chosen = {}, {}
    for task, samples in lm_samples.items():
        names = list(dict.fromkeys(s.get("filter", "none") for s in samples))
        if filter_name is not None and filter_name not in names:
            raise ValueError(f"task {task!r} has no filter {filter_name!r}; its filters: {names}")
        name = filter_name if filter_name is not None else names[0]
        out[task] = [s for s in samples if s.get("filter", "none") == name]
        chosen[task] = name
    return out, chosen


def run_downstream(out: Path, models: list[str], runs: list, tasks: list[str], *, limit=None,
                   batch_size: int = 64, max_batch_tokens: int | None = DEFAULT_MAX_BATCH_TOKENS,
                   device: str | None = None, window: int = 16, seed: int = 0,
                   backend: str | None = None, gen_kwargs: str | None = None, num_fewshot: int | None = None,
                   metric: str = "exact_match", filter_name: str | None = None,
                   include_path: list[str] | None = None, device_map: str | None = None,
                   dtype: str = "auto") -> list[Path]:
    """Run every (model, run) through lm-eval with the ``replayssm`` plugin; save samples per run.

    Each finished run is written to :func:`run_file` (JSON lines of the samples
    table plus response/target) and ``...results.json`` (lm-eval's aggregate
    results) the moment it completes; a run whose file exists is skipped
    (resume). The fp32 reference (first in ``runs``) defines the length
    quartiles, so it is required. A decode batch holds at most ``batch_size``
    rows and ``max_batch_tokens`` of rows x (longest prompt + max_gen_toks)
    (None or 0: no token budget); see :mod:`.lm_eval_plugin`. ``dtype``: the weights' dtype
    (:mod:`.adapters.dtypes`; ``auto`` = the checkpoint's), recorded in OUT/config.json.

    Returns:
        the samples files of all requested (model, run) pairs.
    """
    from tqdm import tqdm

    if not runs or runs[0].label != REFERENCE:
        raise ValueError(f"the first run must be the {REFERENCE!r} reference (use plan_runs)")
    mbt = max_batch_tokens
    if mbt is not None and (isinstance(mbt, bool) or not isinstance(mbt, int) or mbt < 0):
        raise ValueError(f"max_batch_tokens must be an integer >= 0 or None (0 or None = no budget), "
                         f"got {max_batch_tokens!r}")
    out = Path(out)
    from .adapters.dtypes import parse_weight_dtype

    tdtype = parse_weight_dtype(dtype)
    config = run_config(tasks, limit, window, seed, batch_size, gen_kwargs, num_fewshot, metric, filter_name,
                        max_batch_tokens, str(dtype))
    for p in include_path or []:
        if not Path(p).is_dir():
            raise ValueError(f"--include-path {p}: no such folder (a folder of lm-eval task YAML files)")
    todo = [(m, r) for m in models for r in runs if not run_file(out, model_label(m), r).exists()]
    if todo:                      # before any model loads or file is written: one line, not a late traceback
        known = set(task_manager(include_path).all_tasks)
        unknown = [t for t in tasks if t not in known and not Path(t).is_file()]
        if unknown:
            raise ValueError(f"unknown lm-eval task(s) {', '.join(unknown)}: not a task, group or tag of lm-eval, "
                             "of this package (replayssm_copy, ...) or of --include-path, nor a YAML file")
    check_config(out, config)
    done = len(models) * len(runs) - len(todo)
    if done:
        print(f"downstream: {done} run(s) already in {out}, skipping them", flush=True)
    pbar = tqdm(total=len(todo), desc="downstream runs", unit="run")
    loaded: tuple[str, object, object] | None = None
    for model_name, run in todo:
        pbar.set_postfix_str(f"{model_name} {run.label}")
        if loaded is None or loaded[0] != model_name:
            import torch

            from .lm_eval_plugin import load_model_and_tokenizer
            dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
            loaded = (model_name, *load_model_and_tokenizer(model_name, dev, tdtype, device_map))
        rows, results = evaluate_run(loaded[1], loaded[2], model_name, run, tasks, limit=limit,
                                     batch_size=batch_size, max_batch_tokens=max_batch_tokens, device=device,
                                     window=window, seed=seed, backend=backend, gen_kwargs=gen_kwargs,
                                     num_fewshot=num_fewshot, metric=metric, filter_name=filter_name,
                                     include_path=include_path)
        path = run_file(out, model_label(model_name), run)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".results.json").write_text(json.dumps(results, indent=2, default=str))
        g = results["generation"]
        if g["tokens_per_s"]:
            pbar.write(f"downstream: {model_name} {run.label}: {g['tokens']} tokens generated at "
                       f"{g['tokens_per_s']:.1f} tokens/s ({results['weights_dtype']} weights)")
        write_rows_atomic(path, rows)
        pbar.update(1)
    pbar.close()
    return [run_file(out, model_label(m), r) for m in models for r in runs]


def evaluate_run(model, tokenizer, model_name: str, run, tasks: list[str], *, limit=None,
                 batch_size: int = 64, max_batch_tokens: int | None = DEFAULT_MAX_BATCH_TOKENS,
                 device: str | None = None, window: int = 16, seed: int = 0,
                 backend: str | None = None, gen_kwargs: str | None = None, num_fewshot: int | None = None,
                 metric: str = "exact_match", filter_name: str | None = None,
                 include_path: list[str] | None = None) -> tuple[list[dict], dict]:
    """One ``lm_eval.simple_evaluate`` of ``model`` decoding with ``run``'s state (log_samples=True).

    Returns:
        (rows of the samples table, ``{"results": ..., "filters": ...}`` lm-eval aggregates).
    """
    from lm_eval import simple_evaluate

    from .adapters.dtypes import weights_dtype

    from .lm_eval_plugin import ReplaySSMLM

    lm = ReplaySSMLM(pretrained=model_name, model=model, tokenizer=tokenizer, state=run.spec.text, mode=run.mode,
                     window=window, seed=seed, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
                     device=device, backend=backend)
    try:
        res = simple_evaluate(model=lm, tasks=list(tasks), limit=limit, num_fewshot=num_fewshot,
                              log_samples=True, task_manager=task_manager(include_path), gen_kwargs=gen_kwargs,
                              bootstrap_iters=0)
    finally:
        lm.session.close()
    samples, chosen = select_filter(res["samples"], filter_name)
    rows = samples_from_lm_eval(model_label(model_name), run.label, samples, lm.generation_log, metric)
    gen = lm.generation_summary()
    return rows, {"results": res.get("results", {}), "filters": chosen, "run": run.label, "model": model_name,
                  "generation": gen, "weights_dtype": weights_dtype(lm.model)}
