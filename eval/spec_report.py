"""Speculative-decoding report: acceptance rate and tokens per model step of prompt-lookup drafting on the
packaged copy tasks (``eval/tasks/synth_{copy,upper}.jsonl``, :mod:`.synthetic_tasks`), per model, state
variant and draft length T, with a check that every speculative output is the non-speculative greedy one.

For each (model, task, variant) the non-speculative greedy run comes first (draft ``none``), then one run per
``ngram:T``. Each finished run appends its rows to ``spec_runs.csv`` (and its tokens to ``tokens.jsonl``) at
once, so a rerun into the same folder skips finished runs (resume). Columns of ``spec_runs.csv``:

    model, task, variant, draft, doc_id, gen_tokens, steps, drafted, accepted, emitted, identical, correct, seconds

(``identical``: the row's tokens equal the draft-``none`` run's; ``correct``: the text is the task's target;
``seconds``: the batch's wall time shared over its rows; each run's first batch is generated once untimed
before it is timed, so no run pays the process's kernel compiles and graph captures). A folder's runs share
their settings (:data:`_SAME_ON_RESUME`: a rerun with other ones is refused). The summary (``summary.csv``,
``report.md``, ``tokens_per_step.png``) aggregates per (model, task, variant, draft): acceptance rate = accepted /
drafted, tokens per step = emitted / steps (1 for plain decoding), the share of identical rows, and the wall-time
speed-up over the draft-``none`` run on the machine that ran it.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

RUN_COLUMNS = ("model", "task", "variant", "draft", "doc_id", "gen_tokens", "steps", "drafted", "accepted",
               "emitted", "identical", "correct", "seconds")
SPEC_TASKS = ("copy", "upper")
NO_DRAFT = "none"
NEWLINE, EOS = 10, 258


@dataclass(frozen=True)
class SpecReportSettings:
    """What one report runs (defaults: the CPU report, a few minutes on the embedded models).

    Attributes:
        models: model names (``gdn-demo``, ``mamba2-demo``, ``tiny-ARCH``, folders).
        tasks: packaged task names (:data:`SPEC_TASKS`).
        variants: state variants (``[MODE[@L]:]SPEC``).
        drafts: tokens per verify step T of each ``ngram:T`` run.
        max_ngram: longest n-gram matched (``ngram:T:N``).
        docs: documents per task (the shortest first, after ``max_len``).
        max_len: only documents whose target is at most this many tokens.
        batch_size: rows per decode batch.
        window: replay window L.
        device, backend: where and with which state-cache kernels (None: cuda if available; triton on CUDA).
    """

    models: tuple[str, ...] = ("gdn-demo", "mamba2-demo")
    tasks: tuple[str, ...] = SPEC_TASKS
    variants: tuple[str, ...] = ("fp32",)
    drafts: tuple[int, ...] = (2, 4, 8)
    max_ngram: int = 3
    docs: int = 8
    max_len: int = 64
    batch_size: int = 8
    window: int = 16
    device: str | None = None
    backend: str | None = None


def load_task_docs(task: str, docs: int, max_len: int) -> list[dict]:
    """The ``docs`` shortest packaged documents of ``task`` with ``gen_len <= max_len`` (doc_id order among equals)."""
    if task not in SPEC_TASKS:
        raise ValueError(f"unknown task {task!r}; allowed: {', '.join(SPEC_TASKS)}")
    path = Path(__file__).resolve().parent / "tasks" / f"synth_{task}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if r["gen_len"] <= max_len), key=lambda r: (r["gen_len"], r["doc_id"]))
    if not rows:
        raise ValueError(f"no {task} document has a target of <= {max_len} tokens (the shortest has "
                         f"{min(json.loads(x)['gen_len'] for x in path.read_text().splitlines() if x.strip())})")
    return rows[:docs]


#: settings every run of one report folder shares (a resumed call must agree on them)
_SAME_ON_RESUME = ("max_ngram", "docs", "max_len", "batch_size", "window", "backend", "device", "machine")


def _done_runs(out: Path) -> set[tuple]:
    import pandas as pd

    path = out / "spec_runs.csv"
    if not path.exists():
        return set()
    df = pd.read_csv(path, keep_default_na=False)
    return set(map(tuple, df[["model", "task", "variant", "draft"]].astype(str).drop_duplicates().values))


def _reference_tokens(out: Path) -> dict[tuple, list[int]]:
    refs = {}
    path = out / "tokens.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["draft"] == NO_DRAFT:
                refs[(r["model"], r["task"], r["variant"], r["doc_id"])] = r["tokens"]
    return refs


def _append(out: Path, rows: list[dict], tokens: list[dict]) -> None:
    import pandas as pd

    path = out / "spec_runs.csv"
    pd.DataFrame(rows, columns=list(RUN_COLUMNS)).to_csv(path, mode="a", header=not path.exists(), index=False)
    with open(out / "tokens.jsonl", "a") as fh:
        for t in tokens:
            fh.write(json.dumps(t) + "\n")


def _run_one(model, tok, variant: str, draft: str, docs: list[dict], st: SpecReportSettings, sync):
    """Greedy generation of ``docs`` under ``variant`` with ``draft`` (``none`` or ``ngram:T[:N]``): per-doc rows
    without the identity column, and the token lists."""
    import torch

    from .decode import DecodeSession

    rows, toks = [], []
    with DecodeSession(model, [variant], window=st.window, backend=st.backend,
                       draft=None if draft == NO_DRAFT else draft) as s:
        for b in range(0, len(docs), st.batch_size):
            batch = docs[b:b + st.batch_size]
            enc = [tok.encode(d["prompt"], add_special_tokens=False) for d in batch]
            P = max(map(len, enc))
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            ids = torch.tensor([[pad] * (P - len(e)) + e for e in enc])
            mask = torch.tensor([[0] * (P - len(e)) + [1] * len(e) for e in enc])
            n_new = max(d["gen_len"] for d in batch) + 8
            if b == 0:   # untimed warm-up: the first call's kernel compiles and graph captures are not the run's
                s.generate(ids, n_new, attention_mask=mask, stop_token_ids=[NEWLINE, EOS])
                sync()
            t0 = time.perf_counter()
            out = s.generate(ids, n_new, attention_mask=mask, stop_token_ids=[NEWLINE, EOS])
            sync()
            sec = (time.perf_counter() - t0) / len(batch)
            for r, (d, row) in enumerate(zip(batch, out)):
                text = tok.decode(row, skip_special_tokens=True).split("\n", 1)[0]
                stats = s.spec_stats.per_row[r] if s.spec_stats is not None else [len(row) - 1, 0, 0, len(row) - 1]
                rows.append(dict(doc_id=d["doc_id"], gen_tokens=len(row), steps=stats[0], drafted=stats[1],
                                 accepted=stats[2], emitted=stats[3], correct=text == d["target"], seconds=sec))
                toks.append(row)
    return rows, toks


def run_spec_report(out: Path, st: SpecReportSettings) -> Path:
    """Run every missing (model, task, variant, draft) of ``st`` into ``out`` (resume), then write the report;
    returns the path of ``report.md``."""
    import torch
    from tqdm import tqdm

    from .adapters.loading import load_model
    from .decode import parse_variant
    from .drafting import parse_draft

    variants = [parse_variant(v).label for v in st.variants]
    drafts = [NO_DRAFT] + [parse_draft(f"ngram:{T}:{st.max_ngram}").text for T in st.drafts]
    task_docs = {t: load_task_docs(t, st.docs, st.max_len) for t in st.tasks}
    out.mkdir(parents=True, exist_ok=True)
    device = st.device or ("cuda" if torch.cuda.is_available() else "cpu")
    done = _done_runs(out)
    cfg = dict(vars(st), device=device, machine=machine(device))
    old = json.loads((out / "config.json").read_text()) if done and (out / "config.json").exists() else {}
    for k in _SAME_ON_RESUME:   # the runs of a folder are comparable: made with the same settings
        if k in old and old[k] != cfg[k]:
            raise ValueError(f"{out} holds runs made with {k}={old[k]!r}, now {k}={cfg[k]!r}: rerun with the same "
                             f"setting to add runs, or use another --out")
    for k in ("models", "tasks", "variants", "drafts"):   # what the folder holds: the runs of both calls
        cfg[k] = list(dict.fromkeys(list(old.get(k, [])) + list(cfg[k])))
    (out / "config.json").write_text(json.dumps(cfg, indent=1, default=list))
    todo = [(m, t, v, d) for m in st.models for t in st.tasks for v in variants for d in drafts
            if (m, t, v, d) not in done]
    sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)
    loaded: dict = {}
    refs = _reference_tokens(out)
    for m, t, v, d in tqdm(todo, desc="spec report runs", disable=not todo):
        if m not in loaded:
            loaded.clear()
            lm = load_model(m, device=device, dtype="float32")
            loaded[m] = (lm.model, lm.tokenizer)
        model, tok = loaded[m]
        rows, toks = _run_one(model, tok, v, d, task_docs[t], st, sync)
        for row, tk, doc in zip(rows, toks, task_docs[t]):
            key = (m, t, v, doc["doc_id"])
            if d == NO_DRAFT:
                refs[key] = tk
            row.update(model=m, task=t, variant=v, draft=d, identical=refs.get(key) == tk)
        _append(out, rows, [dict(model=m, task=t, variant=v, draft=d, doc_id=doc["doc_id"], tokens=tk)
                            for tk, doc in zip(toks, task_docs[t])])
    return write_spec_report(out)


def machine(device: str) -> str:
    """A one-line description of the machine: the GPU name on CUDA, else the CPU model and core count."""
    import os

    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU {cpu}, {os.cpu_count()} cores (torch {torch.__version__})"


def summarize(runs):
    """Per (model, task, variant, draft): docs, acceptance_rate, tokens_per_step, identical (share), correct
    (share), speedup (wall time of the draft-none run / this run's)."""
    keys = ["model", "task", "variant", "draft"]
    g = runs.groupby(keys, sort=False)
    s = g[["steps", "drafted", "accepted", "emitted", "seconds"]].sum()
    s["docs"] = g.size()
    s["identical"] = g["identical"].mean()
    s["correct"] = g["correct"].mean()
    s["acceptance_rate"] = s["accepted"] / s["drafted"].where(s["drafted"] > 0)
    s["tokens_per_step"] = s["emitted"] / s["steps"].where(s["steps"] > 0)
    s = s.reset_index()
    ref = s[s["draft"] == NO_DRAFT].set_index(keys[:3])["seconds"]
    s["speedup"] = [ref.get(tuple(r[k] for k in keys[:3]), float("nan")) / r["seconds"] if r["seconds"] else
                    float("nan") for _, r in s.iterrows()]
    return s[keys + ["docs", "drafted", "accepted", "acceptance_rate", "tokens_per_step", "identical", "correct",
                     "speedup"]]


def _plot(summary, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .drafting import parse_draft

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    spec = summary[summary["draft"] != NO_DRAFT].copy()
    spec["T"] = [parse_draft(d).tokens for d in spec["draft"]]
    styles = ["-", "--", "-.", ":"]            # one line style per model, so equal curves of two models both show
    models = list(dict.fromkeys(spec["model"]))
    for i, ((m, t, v), grp) in enumerate(spec.groupby(["model", "task", "variant"], sort=False)):
        grp = grp.sort_values("T")
        k = models.index(m)
        ax.plot(grp["T"], grp["tokens_per_step"], ls=styles[k % 4], marker="os^v"[k % 4], ms=7 - 2 * (k % 3),
                label=f"{m} {t} {v}")
    if len(spec):
        Ts = sorted(set(spec["T"]))
        ax.plot(Ts, Ts, ls=":", c="grey", label="all drafts accepted (T)")
        ax.set_xticks(Ts)
    ax.set_xlabel("tokens per verify step T (ngram:T)")
    ax.set_ylabel("tokens per model step")
    ax.set_title("prompt-lookup speculation on the packaged copy tasks")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_spec_report(out: Path) -> Path:
    """``summary.csv``, ``tokens_per_step.png`` and ``report.md`` from ``out/spec_runs.csv``."""
    import pandas as pd

    runs_path = out / "spec_runs.csv"
    if not runs_path.exists():
        raise FileNotFoundError(f"{runs_path} does not exist: run the report first (without --report-only)")
    runs = pd.read_csv(runs_path, keep_default_na=False)
    summary = summarize(runs)
    summary.to_csv(out / "summary.csv", index=False)
    _plot(summary, out / "tokens_per_step.png")
    cfg = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    n_bad = int((~runs["identical"].astype(bool)).sum())
    md = [
        "# Speculative decoding with prompt-lookup drafts",
        "",
        f"Machine: {cfg.get('machine', '?')}; device {cfg.get('device', '?')}, state-cache backend "
        f"{cfg.get('backend') or 'auto (torch on a CPU, triton on CUDA)'}. Made by `replayssm-quant spec-report` "
        f"with the settings {json.dumps({k: cfg[k] for k in cfg if k not in ('machine',)})}.",
        "",
        "Greedy decoding of the packaged copy tasks (`eval/tasks/synth_*.jsonl`: the shortest "
        f"{cfg.get('docs', '?')} documents per task with targets of <= {cfg.get('max_len', '?')} tokens) by "
        "`DecodeSession(..., draft='ngram:T')`: each model step verifies the last accepted token plus up to T-1 "
        "drafts from n-gram matching in the prompt and the text so far (no draft model); drafts are accepted while "
        "they equal the argmax. `acceptance_rate` = accepted / drafted tokens, `tokens_per_step` = tokens emitted "
        "per model step of a row (1 for plain decoding, at most T), `identical` = share of rows whose tokens equal "
        "the non-speculative greedy run's (draft `none`), `correct` = share of exact targets, `speedup` = wall time "
        "of the draft-`none` run / this run's on this machine, each run timed after an untimed pass over its first "
        "batch (on a CPU with the torch reference of the state cache it measures the Python reference, not the "
        "kernels). The drafts depend only on the prompt and the "
        "text generated so far, and a draft is accepted iff it is the greedy token, so two models that generate "
        "the same text get the same drafts and acceptance (the `upper` task's outputs differ from their prompts "
        "in case, so its drafts rarely match).",
        "",
        f"Rows differing from the non-speculative greedy output: **{n_bad}** of {len(runs)}.",
        "",
        summary.to_markdown(index=False, floatfmt=".3f"),
        "",
        "![tokens per model step](tokens_per_step.png)",
        "",
        "Files: `spec_runs.csv` (one row per document and run), `summary.csv` (this table), `tokens.jsonl` "
        "(generated tokens), `config.json`.",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path
