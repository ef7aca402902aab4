"""The KL report of a results folder (``replayssm-quant report DIR``).

Reads a :class:`~replayssm_quant.eval.results.ResultsStore` and writes, into ``DIR``:

* ``results.csv``   one row per (document, variant): mean KL, mean NLL (deterministic; the run's results file)
* ``buckets.csv``   mean KL per variant and log2 position bucket (1, 2-3, 4-7, ...)
* ``quartiles.csv`` mean KL per variant and position quartile
* ``ratios.csv``    shared / separate mean-KL ratios per bucket (same read format, replay mode)
* ``kl_vs_position.png`` (log-log), ``ratio_vs_position.png``
* ``report.md``     settings, throughput, the tables and the headline ratio
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from .results import ResultsStore

HEADLINE = ("nvfp4+sr", "nvfp4/fp8+sr")


def log2_buckets(n: int) -> list[tuple[int, int]]:
    """Inclusive 1-based position ranges ``[1,1], [2,3], [4,7], ...`` covering ``1..n``.

    A last bucket holding a single position (n a power of two) is merged into the one before:
    ``n = 8`` gives ``[1,1], [2,3], [4,8]``.
    """
    out, lo = [], 1
    while lo <= n:
        out.append((lo, min(2 * lo - 1, n)))
        lo *= 2
    if len(out) > 2 and out[-1][0] == out[-1][1]:
        out[-2:] = [(out[-2][0], out[-1][1])]
    return out


def quartiles(n: int) -> list[tuple[int, int]]:
    """Four inclusive 1-based position ranges splitting ``1..n`` as evenly as possible (fewer if n < 4)."""
    edges = [round(i * n / 4) for i in range(5)]
    return [(edges[i] + 1, edges[i + 1]) for i in range(4) if edges[i + 1] > edges[i]]


def _label(r: tuple[int, int]) -> str:
    return f"{r[0]}" if r[0] == r[1] else f"{r[0]}-{r[1]}"


def load_tables(root: str | Path) -> dict:
    """DataFrames of a results folder: ``records``, ``positions`` (variant x position mean KL) and the bucket tables."""
    store = ResultsStore(root)
    cfg = store.read_config()
    if cfg is None:
        raise FileNotFoundError(f"{root} is not a KL results folder (no run.json); run `replayssm-quant eval --out {root}` first")
    recs = store.records()
    if not recs:
        raise ValueError(f"{root} holds no finished records yet")
    order = list(dict.fromkeys(["fp32"] + list(cfg.get("variants", []))))
    rows, kl_by_var = [], {}
    for meta, arr in recs:
        rows.append({k: meta[k] for k in ("doc", "doc_id", "variant", "spec", "mode", "batch", "mean_kl", "mean_nll")})
        kl_by_var.setdefault(meta["variant"], []).append(arr["kl"])
    records = pd.DataFrame(rows)
    variants = [v for v in order if v in kl_by_var] + sorted(v for v in kl_by_var if v not in order)
    records["variant"] = pd.Categorical(records["variant"], variants, ordered=True)
    records = records.sort_values(["doc", "variant"]).reset_index(drop=True)
    N = min(len(a) for arrs in kl_by_var.values() for a in arrs)
    mean_pos = {v: np.mean([a[:N] for a in kl_by_var[v]], axis=0) for v in variants}
    ndocs = {v: len(kl_by_var[v]) for v in variants}

    def bucket_table(ranges):
        data = {_label(r): [float(np.mean(np.concatenate([a[r[0] - 1:r[1]] for a in kl_by_var[v]]))) for v in variants]
                for r in ranges}
        df = pd.DataFrame(data, index=pd.Index(variants, name="variant"))
        df.insert(0, "docs", [ndocs[v] for v in variants])
        return df

    buckets, quarts = bucket_table(log2_buckets(N)), bucket_table(quartiles(N))
    pairs = []
    for s in variants:
        if ":" in s or "/" in s or s == "fp32":
            continue
        read = s.split("+")[0]
        for t in variants:
            if ":" not in t and "/" in t and t.split("/")[0] == read:
                pairs.append((s, t))
    bcols = [c for c in buckets.columns if c != "docs"]
    ratios = pd.DataFrame([[buckets.loc[s, c] / buckets.loc[t, c] if buckets.loc[t, c] > 0 else float("nan")
                            for c in bcols] for s, t in pairs],
                          index=pd.Index([f"{s} / {t}" for s, t in pairs], name="shared / separate"), columns=bcols)
    return {"config": cfg, "records": records, "mean_pos": mean_pos, "variants": variants, "N": N,
            "buckets": buckets, "quartiles": quarts, "ratios": ratios, "pairs": pairs,
            "batches": store.batches()}


def _plots(t: dict, root: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    N = t["N"]
    pos = np.arange(1, N + 1)
    fig, ax = plt.subplots(figsize=(8, 5))
    for v in t["variants"]:
        if v == "fp32":
            continue
        y = t["mean_pos"][v]
        ranges = log2_buckets(N)
        bx = [math.sqrt(a * b) for a, b in ranges]
        by = [float(np.mean(y[a - 1:b])) for a, b in ranges]
        line, = ax.plot(bx, np.where(np.array(by) > 0, by, np.nan), marker="o", label=v, lw=1.5)
        ax.plot(pos, np.where(y > 0, y, np.nan), color=line.get_color(), alpha=0.2, lw=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("decode position t (tokens after prefill)")
    ax.set_ylabel("KL(p_fp32 || p_spec) [nats]")
    ax.set_title(f"{t['config'].get('model')}: KL vs position (faint: per position; markers: log2-bucket means)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(root / "kl_vs_position.png", dpi=120)
    plt.close(fig)
    out = ["kl_vs_position.png"]
    if len(t["ratios"]):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ranges = log2_buckets(N)
        bx = [math.sqrt(a * b) for a, b in ranges]
        for name, row in t["ratios"].iterrows():
            ax.plot(bx, row.values, marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xlabel("decode position t (log2-bucket centre)")
        ax.set_ylabel("mean KL shared / mean KL separate")
        ax.set_title("How much lower KL the separate checkpoint gives")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(root / "ratio_vs_position.png", dpi=120)
        plt.close(fig)
        out.append("ratio_vs_position.png")
    return out


def _md(df: pd.DataFrame, fmt: str = "{:.3g}") -> str:
    return df.to_markdown(floatfmt=".3g") if _has_tabulate() else "```\n" + df.to_string(float_format=fmt.format) + "\n```"


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


def headline(t: dict) -> str:
    """One sentence: the shared nvfp4+sr / separate nvfp4/fp8+sr ratio in the longest bucket (if both ran)."""
    s, p = HEADLINE
    last = [c for c in t["buckets"].columns if c != "docs"][-1]
    if s in t["buckets"].index and p in t["buckets"].index:
        a, b = t["buckets"].loc[s, last], t["buckets"].loc[p, last]
        ratio = a / b if b > 0 else float("inf")
        return (f"In the longest bucket (positions {last}), mean KL of shared {s} is {a:.4g} nats and of separate "
                f"{p} is {b:.4g} nats: ratio **{ratio:.3g}x** (the paper: 13-36x on Qwen3.5-4B).")
    return f"(the headline ratio needs both {s} and {p} among the variants)"


def build_report(root: str | Path) -> Path:
    """Write the CSVs, plots and ``report.md`` of ``root``; returns the markdown path."""
    root = Path(root)
    t = load_tables(root)
    cfg = t["config"]
    t["records"].to_csv(root / "results.csv", index=False, float_format="%.6g")
    t["buckets"].to_csv(root / "buckets.csv", float_format="%.6g")
    t["quartiles"].to_csv(root / "quartiles.csv", float_format="%.6g")
    t["ratios"].to_csv(root / "ratios.csv", float_format="%.6g")
    plots = _plots(t, root)
    from replayssm_quant.quant.spec import parse_state_spec

    summ = t["records"].groupby("variant", observed=True).agg(docs=("doc", "count"), mean_kl=("mean_kl", "mean"),
                                                              mean_nll=("mean_nll", "mean"))
    last = [c for c in t["buckets"].columns if c != "docs"][-1]
    summ[f"kl positions {last}"] = t["buckets"][last]
    bpe = []
    for v in summ.index:
        mode, _, spec = v.rpartition(":")
        bpe.append(parse_state_spec(spec).step_bytes_per_element(mode or "replay", cfg.get("window", 16)))
    summ["state B/elem/step"] = bpe
    b = t["batches"]
    rows_tok = sum(x["rows"] * x["decode_steps"] for x in b)
    secs = sum(x["decode_seconds"] for x in b)
    lines = [
        f"# KL report: {cfg.get('model')}",
        "",
        f"Command: `{cfg.get('command', '')}`  ",
        f"Generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; run settings: prefill "
        f"{cfg.get('prefill')}, teacher-forced tokens {cfg.get('tokens')}, documents {t['records']['doc'].nunique()}, "
        f"window L={cfg.get('window')}, seed {cfg.get('seed')}, data {cfg.get('data') or 'embedded held-out books'}.  ",
        f"Environment: {cfg.get('env', platform.platform())}",
        "",
        "KL(p_fp32 || p_spec) in nats over the full vocabulary at each teacher-forced decode position t "
        "(t = decode steps since the fp32 prefill). Variants without a `conventional:` prefix run ReplaySSM "
        "replay decode; `conventional:` rounds the state every step.",
        "",
        "## Headline",
        "",
        headline(t),
        "",
        "## Summary (mean over documents and positions)",
        "",
        _md(summ),
        "",
        "## Mean KL per log2 position bucket",
        "",
        _md(t["buckets"]),
        "",
        "## Mean KL per position quartile",
        "",
        _md(t["quartiles"]),
        "",
        "## Shared / separate ratio per bucket",
        "",
        _md(t["ratios"]) if len(t["ratios"]) else "(no shared/separate pair with the same read format among the variants)",
        "",
        "## Throughput",
        "",
        (f"{rows_tok} row-tokens decoded in {secs:.1f} s of teacher-forced decoding: "
         f"**{rows_tok / secs:.1f} tokens/s** over all (variant, document) rows "
         f"({len(b)} batches, device {b[-1]['device']})." if secs > 0 else "(no timing recorded)"),
        "",
        "## Plots",
        "",
    ] + [f"![{p}]({p})" for p in plots] + [
        "",
        "Files: results.csv (per document and variant), buckets.csv, quartiles.csv, ratios.csv; per-position "
        "arrays in records/<doc>/<variant>.npz.",
    ]
    md = root / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md
