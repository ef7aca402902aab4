"""The downstream-accuracy report: markdown + CSV + bar plot from a ``replayssm-quant downstream`` folder.

Inputs: ``OUT/runs/MODEL/RUN.jsonl`` (samples, see :mod:`.downstream`) and ``OUT/config.json``.
Outputs in ``OUT``:

* ``downstream_quartiles.csv`` - :func:`~.downstream.quartile_table` (every model, task, quartile, run)
* ``downstream_delta_pp.png``   - change from fp32 in percentage points per length quartile
* ``README.md``                 - the tables and what they mean
"""

from __future__ import annotations

import json
from pathlib import Path

from .downstream import QUARTILES, REFERENCE, delta_pivot, load_samples, quartile_table

CSV_NAME, PNG_NAME, MD_NAME = "downstream_quartiles.csv", "downstream_delta_pp.png", "README.md"


def _quartile_labels(table, model: str, task: str) -> list[str]:
    t = table[(table.model == model) & (table.task == task) & (table.run == REFERENCE)].set_index("quartile")
    return [f"{q}\n{int(t.loc[q, 'len_min'])}-{int(t.loc[q, 'len_max'])} tok" if q in t.index else q
            for q in QUARTILES + ("all",)]


def plot_deltas(table, path: Path) -> Path:
    """Grouped bars: one panel per (model, task incl. ``all``), x = length quartile, one bar per run.

    Args:
        table: :func:`quartile_table` output.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(table.model))
    tasks = ["all"] + sorted(t for t in table.task.unique() if t != "all")
    runs = [r for r in dict.fromkeys(table.run) if r != REFERENCE]
    fig, axes = plt.subplots(len(models), len(tasks), figsize=(4.2 * len(tasks) + 1, 3.4 * len(models)),
                             squeeze=False, sharey=True)
    width = 0.8 / max(1, len(runs))
    xs = np.arange(len(QUARTILES) + 1)
    cmap = plt.get_cmap("tab10")
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            sub = table[(table.model == model) & (table.task == task)]
            for k, run in enumerate(runs):
                r = sub[sub.run == run].set_index("quartile")
                vals = [r.loc[q, "delta_pp"] if q in r.index else np.nan for q in QUARTILES + ("all",)]
                ax.bar(xs + (k - (len(runs) - 1) / 2) * width, vals, width, label=run, color=cmap(k % 10))
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks(xs, _quartile_labels(table, model, task), fontsize=7)
            ax.set_title(f"{model} / {'all tasks' if task == 'all' else task}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if j == 0:
                ax.set_ylabel("accuracy change vs fp32 (pp)")
    lo, hi = axes[0][0].get_ylim()  # shared y: keep at least +-5 pp visible (all-zero panels otherwise collapse)
    axes[0][0].set_ylim(min(lo, -5.0), max(hi, 5.0))
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=min(6, len(labels)), fontsize=8,
                   bbox_to_anchor=(0.5, 1.0))
    fig.suptitle("Downstream accuracy change from fp32 by fp32 generation-length quartile", y=1.06, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def _fmt_pp(x) -> str:
    return "" if x != x else f"{x:+.1f}"


def _md_table(df, fmt=lambda v: v) -> str:
    cols = [str(c) for c in df.columns]
    idx_names = [n or "" for n in (df.index.names if df.index.nlevels > 1 else [df.index.name])]
    lines = ["| " + " | ".join(idx_names + cols) + " |", "|" + "---|" * (len(idx_names) + len(cols))]
    for idx, row in df.iterrows():
        idx = idx if isinstance(idx, tuple) else (idx,)
        lines.append("| " + " | ".join([str(x) for x in idx] + [fmt(v) for v in row.tolist()]) + " |")
    return "\n".join(lines)


def headline(table, model: str) -> list[str]:
    """Sentences with the longest-quartile numbers of one model (pooled over tasks), from the data."""
    t = table[(table.model == model) & (table.task == "all")]
    q4 = t[t.quartile == "Q4"].set_index("run")
    if REFERENCE not in q4.index:
        return []
    ref = q4.loc[REFERENCE]
    out = [f"fp32 accuracy in the longest quartile (Q4, {int(ref.len_min)}-{int(ref.len_max)} generated tokens, "
           f"n = {int(ref.n)}): {ref.accuracy:.1f}%."]
    for run, r in q4.iterrows():
        if run != REFERENCE:
            out.append(f"`{run}`: {r.accuracy:.1f}% ({_fmt_pp(r.delta_pp)} pp).")
    return out


def write_report(out: Path) -> Path:
    """Build CSV, PNG and README.md in ``out`` from its finished runs; returns the markdown path."""
    out = Path(out)
    samples = load_samples(out)
    table = quartile_table(samples)
    table.to_csv(out / CSV_NAME, index=False)
    plot_deltas(table, out / PNG_NAME)
    cfg_path = out / "config.json"
    config = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    models = list(dict.fromkeys(table.model))
    L = ["# Downstream accuracy by generation-length quartile", "",
         "Generated by `replayssm-quant downstream` (replayssm_quant/eval/downstream_report.py); do not edit by hand.",
         "",
         "Every sample is decoded greedily by lm-evaluation-harness through the `replayssm` plugin: the prompt is "
         "prefilled in fp32, every generated token is stepped through the SSM state cache in the run's state "
         "format. A sample's length is the number of tokens the **fp32 reference** generated for it; samples are "
         "split into four equal-count length quartiles per (model, task) (Q1 shortest; ties broken by doc id). "
         "Per quartile the table gives each run's accuracy change from fp32 in percentage points (pp); "
         "`all tasks` pools the tasks, each sample keeping its own task's quartile. Run names: `SPEC` is replay "
         "decoding (window L) with that state spec, `conventional:SPEC` rounds the state every step.", "",
         f"![accuracy change by quartile]({PNG_NAME})", "",
         f"Full table (accuracy, change, n, length range for every model, task, quartile and run): [{CSV_NAME}]({CSV_NAME}).",
         "", "## Configuration", "", "```json", json.dumps(config, indent=2, sort_keys=True), "```", ""]
    for model in models:
        L += [f"## {model}", ""]
        L += ["Longest quartile, all tasks: " + " ".join(headline(table, model)), ""]
        for task in ["all"] + sorted(t for t in table.task.unique() if t != "all"):
            sub = table[(table.model == model) & (table.task == task)]
            if sub.empty:
                continue
            title = "all tasks" if task == "all" else f"task `{task}`"
            ref = sub[sub.run == REFERENCE].set_index("quartile")
            L += [f"### {title}: change from fp32 (pp)", ""]
            piv = delta_pivot(table[table.model == model], task)
            if not piv.empty:
                L += [_md_table(piv.droplevel(0), _fmt_pp), ""]
            acc = sub.pivot_table(index="run", columns="quartile", values="accuracy", sort=False)
            acc = acc[[c for c in QUARTILES + ("all",) if c in acc.columns]]
            L += [f"Accuracy (%) of every run on {title}:", "", _md_table(acc, lambda v: f"{v:.1f}"), ""]
            rng = ", ".join(f"{q}: {int(ref.loc[q, 'len_min'])}-{int(ref.loc[q, 'len_max'])} tokens "
                            f"(n = {int(ref.loc[q, 'n'])}, one sample = {100 / ref.loc[q, 'n']:.1f} pp)"
                            for q in QUARTILES if q in ref.index)
            L += [f"fp32 generation lengths per quartile: {rng}.", ""]
    L += ["## For comparison: the source paper", "",
          "The ReplaySSM paper (DESIGN.md sec. 6) reports, on its long-generation tasks and models, that shared "
          "NVFP4+SR loses 20.9-28.2 points in the longest quartiles while separate NVFP4/FP8+SR keeps the gap at "
          "2.0-3.4 points. Those are the paper's numbers on its models, not results of this run.", ""]
    md = out / MD_NAME
    md.write_text("\n".join(L))
    return md
