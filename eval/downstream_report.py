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


#: colour of the fp32 reference's bars (its change is 0 by definition; drawn so the baseline is visible)
REFERENCE_COLOR = "0.45"


def delta_figure(table):
    """Grouped bars: one panel per (model, task incl. ``all``), x = length quartile, one bar per run
    (the fp32 reference first, 0 by definition). Every bar is labelled with its change in pp; a
    change of exactly 0 (a bar of no height) gets a diamond on the zero line, a quartile without
    samples a grey "n/a", so neither looks like the other.

    Args:
        table: :func:`quartile_table` output.

    Returns:
        the matplotlib Figure (the caller saves and closes it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(table.model))
    tasks = ["all"] + sorted(t for t in table.task.unique() if t != "all")
    runs = [REFERENCE] + [r for r in dict.fromkeys(table.run) if r != REFERENCE]
    fig, axes = plt.subplots(len(models), len(tasks), figsize=(4.2 * len(tasks) + 1, 3.4 * len(models)),
                             squeeze=False, sharey=True)
    width = 0.8 / len(runs)
    xs = np.arange(len(QUARTILES) + 1)
    cmap = plt.get_cmap("tab10")
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            sub = table[(table.model == model) & (table.task == task)]
            for k, run in enumerate(runs):
                r = sub[sub.run == run].set_index("quartile")
                vals = np.array([r.loc[q, "delta_pp"] if q in r.index else np.nan for q in QUARTILES + ("all",)],
                                dtype=float)
                offs = xs + (k - (len(runs) - 1) / 2) * width
                ref = run == REFERENCE
                color = REFERENCE_COLOR if ref else cmap((k - 1) % 10)
                ax.bar(offs, vals, width, color=color, label=f"{run} (reference, 0 by definition)" if ref else run)
                zero = vals == 0
                ax.plot(offs[zero], vals[zero], linestyle="none", marker="D", markersize=4, color=color,
                        markeredgecolor="black", markeredgewidth=0.4, zorder=3)
                for x, v in zip(offs, vals):
                    if np.isnan(v):
                        ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=5, color="0.5", rotation=90)
                    else:
                        ax.annotate("0" if v == 0 else f"{v:+.1f}", (x, v), xytext=(0, 3 if v >= 0 else -3),
                                    textcoords="offset points", ha="center", va="bottom" if v >= 0 else "top",
                                    fontsize=5, rotation=90)
            ax.axhline(0, color="black", lw=0.8, zorder=2)
            ax.set_xticks(xs, _quartile_labels(table, model, task), fontsize=7)
            ax.set_title(f"{model} / {'all tasks' if task == 'all' else task}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if j == 0:
                ax.set_ylabel("accuracy change vs fp32 (pp)")
    lo, hi = axes[0][0].get_ylim()  # shared y: keep at least +-5 pp visible (all-zero panels otherwise collapse)
    axes[0][0].set_ylim(min(lo, -5.0) - 0.1 * (hi - lo), max(hi, 5.0) + 0.1 * (hi - lo))  # room for the labels
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout()
    ncol = min(6, len(labels))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, bbox_to_anchor=(0.5, 1.0))
    rows = -(-len(labels) // ncol)  # the legend sits above the panels, the title above the legend
    fig.suptitle("Downstream accuracy change from fp32 by fp32 generation-length quartile",
                 y=1.0 + (0.22 * rows + 0.12) / fig.get_figheight(), va="bottom", fontsize=10)
    return fig


def plot_deltas(table, path: Path) -> Path:
    """:func:`delta_figure` saved as a PNG at ``path``."""
    import matplotlib.pyplot as plt

    fig = delta_figure(table)
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
    """Sentences with the longest-quartile numbers of one model (pooled over tasks), from the data.

    The longest quartile present: Q4, or a lower one when the tasks have fewer than 4 samples each
    (then the sentence says so). Never empty."""
    t = table[(table.model == model) & (table.task == "all")]
    ref_q = t[t.run == REFERENCE].quartile
    present = [q for q in QUARTILES if q in set(ref_q)]
    if not present:
        return [f"no fp32 reference samples for {model}."]
    top = present[-1]
    qt = t[t.quartile == top].set_index("run")
    ref = qt.loc[REFERENCE]
    name = "the longest quartile" if top == QUARTILES[-1] else (
        f"the longest quartile with samples ({', '.join(q for q in QUARTILES if q not in present)} empty: "
        "fewer than 4 samples per task)")
    out = [f"fp32 accuracy in {name} ({top}, {int(ref.len_min)}-{int(ref.len_max)} generated tokens, "
           f"n = {int(ref.n)}): {ref.accuracy:.1f}%."]
    for run, r in qt.iterrows():
        if run != REFERENCE:
            out.append(f"`{run}`: {r.accuracy:.1f}% ({_fmt_pp(r.delta_pp)} pp).")
    return out


def generation_table(out: Path):
    """Generation speed per finished run, from ``OUT/runs/MODEL/RUN.results.json`` (the plugin's generation
    counts): DataFrame model, run, weights, tokens, seconds, tokens/s (empty when no run has the counts)."""
    import pandas as pd

    rows = []
    for f in sorted((Path(out) / "runs").glob("*/*.results.json")):
        r = json.loads(f.read_text())
        g = r.get("generation")
        if g:
            rows.append({"model": f.parent.name, "run": r.get("run", f.name.split(".results")[0]),
                         "weights": r.get("weights_dtype"), "tokens": g["tokens"], "seconds": g["seconds"],
                         "tokens/s": g["tokens"] / g["seconds"] if g["seconds"] > 0 else None})
    return pd.DataFrame(rows, columns=["model", "run", "weights", "tokens", "seconds", "tokens/s"])


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
    gen = generation_table(out)
    if not gen.empty:
        L += ["## Generation speed", "",
              "Tokens generated per second of `generate_until` (prefill included, all rows of a batch counted; one "
              "lm-eval run per row):", "", gen.to_markdown(index=False, floatfmt=".4g"), ""]
    L += ["## For comparison: the source paper", "",
          "The ReplaySSM paper (DESIGN.md sec. 6) reports, on its long-generation tasks and models, that shared "
          "NVFP4+SR loses 20.9-28.2 points in the longest quartiles while separate NVFP4/FP8+SR keeps the gap at "
          "2.0-3.4 points. Those are the paper's numbers on its models, not results of this run.", ""]
    md = out / MD_NAME
    md.write_text("\n".join(L))
    return md
