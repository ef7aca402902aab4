"""The KL report of a results folder (``replayssm-quant report DIR``).

Reads a :class:`~replayssm_quant.eval.results.ResultsStore` and writes, into ``DIR`` (or ``out``):

* ``results.csv``       one row per (document, variant): mean KL, mean NLL (deterministic; the run's results file)
* ``doc_buckets.csv``   mean KL per (document, variant) and log2 position bucket (1, 2-3, 4-7, ...)
* ``doc_quartiles.csv`` mean KL per (document, variant) and position quartile
* ``positions.csv``     mean KL over documents per variant and position
* ``buckets.csv``, ``quartiles.csv``  the per-variant means of the two above
* ``stats.csv``         per variant and log2 bucket: mean KL +- SE, KL percentiles, same top-1 %, delta-p, PPL ratio
  (:mod:`.kl_stats`; from records that carry top1 / dp)
* ``ratios.csv``        shared / separate mean-KL ratios per bucket (same read format, replay mode),
  with a bootstrap interval over documents (``ratio_intervals.csv``)
* ``growth.csv``        per variant: mean KL in bucket 16-31 and in the longest bucket, and their ratio
* ``kl_vs_position.png`` (log-log), ``ratio_vs_position.png`` (with the intervals as error bars)
* ``report.md``         settings, throughput, the tables and the headline ratio with what the run can show

The per-position arrays in ``records/`` are read when present; without them (a committed report
folder) the report is rebuilt from ``results.csv``, ``doc_buckets.csv``, ``doc_quartiles.csv``
and ``positions.csv``.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from .kl_stats import compact, stats_table
from .results import ResultsStore

HEADLINE = ("nvfp4+sr", "nvfp4/fp8+sr")
#: the bucket KL growth is measured from: the first one after the first flush at the default window L=16
GROWTH_FROM = "16-31"


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


#: the CSVs a report is rebuilt from when ``records/`` is gone
SOURCE_CSVS = ("results.csv", "doc_buckets.csv", "doc_quartiles.csv", "positions.csv")
_REC_COLS = ["doc", "doc_id", "variant", "spec", "mode", "batch", "mean_kl", "mean_nll"]
#: bootstrap resamples of the documents for the ratio intervals (fixed seed: the report is deterministic)
BOOTSTRAP, BOOTSTRAP_SEED = 2000, 0


def _order(cfg: dict, present) -> list[str]:
    order = list(dict.fromkeys(["fp32"] + list(cfg.get("variants", []))))
    present = list(dict.fromkeys(present))
    return [v for v in order if v in present] + sorted(v for v in present if v not in order)


def _from_records(recs, cfg) -> dict:
    rows, kl_by, arrays = [], {}, {}
    for meta, arr in recs:
        rows.append({k: meta[k] for k in _REC_COLS})
        kl_by[(meta["doc"], meta["variant"])] = arr["kl"]
        arrays[(meta["doc"], meta["variant"])] = arr
    records = pd.DataFrame(rows)
    variants = _order(cfg, records["variant"])
    N = min(len(a) for a in kl_by.values())
    docs = sorted({d for d, _ in kl_by})

    def per_doc(ranges):
        out = [{"doc": d, "variant": v, **{_label(r): float(np.mean(kl_by[(d, v)][r[0] - 1:r[1]])) for r in ranges}}
               for d in docs for v in variants if (d, v) in kl_by]
        return pd.DataFrame(out)

    positions = pd.DataFrame({v: np.mean([kl_by[(d, v)][:N] for d in docs if (d, v) in kl_by], axis=0)
                              for v in variants}, index=pd.Index(np.arange(1, N + 1), name="position"))
    return {"records": records, "doc_buckets": per_doc(log2_buckets(N)), "doc_quartiles": per_doc(quartiles(N)),
            "positions": positions, "variants": variants, "N": N,
            "stats": stats_table(arrays, [v for v in variants if v != "fp32"], log2_buckets(N))}


def _from_csvs(root: Path, cfg) -> dict:
    missing = [f for f in SOURCE_CSVS if not (root / f).is_file()]
    if missing:
        raise ValueError(f"{root} holds no finished records and lacks {', '.join(missing)} to rebuild the report from")
    records = pd.read_csv(root / "results.csv")
    positions = pd.read_csv(root / "positions.csv", index_col="position")
    stats = pd.read_csv(root / "stats.csv", dtype={"positions": str}) if (root / "stats.csv").is_file() else None
    return {"records": records, "doc_buckets": pd.read_csv(root / "doc_buckets.csv"),
            "doc_quartiles": pd.read_csv(root / "doc_quartiles.csv"), "positions": positions,
            "variants": _order(cfg, records["variant"]), "N": int(positions.index.max()), "stats": stats}


def ratio_pairs(variants: list[str]) -> list[tuple[str, str]]:
    """(shared, separate) replay-mode pairs with the same read format: ``("nvfp4+sr", "nvfp4/fp8+sr")``."""
    pairs = []
    for s in variants:
        if ":" in s or "/" in s or s == "fp32":
            continue
        read = s.split("+")[0]
        pairs += [(s, t) for t in variants if ":" not in t and "/" in t and t.split("/")[0] == read]
    return pairs


def growth_table(buckets: pd.DataFrame, start: str = GROWTH_FROM) -> pd.DataFrame:
    """Per variant (fp32 left out): mean KL in bucket ``start`` and in the longest bucket, and their ratio
    (how much the KL grows over the decode). Empty when ``start`` is not a bucket or is the longest one.

    Args:
        buckets: the per-variant bucket means (``load_tables(...)["buckets"]``: index variant, a ``docs``
            column, then one column per log2 bucket).
    """
    cols = [c for c in buckets.columns if c != "docs"]
    if start not in cols or start == cols[-1]:
        return pd.DataFrame()
    last = cols[-1]
    b = buckets[buckets.index != "fp32"]
    growth = [b.loc[v, last] / b.loc[v, start] if b.loc[v, start] > 0 else float("nan") for v in b.index]
    return pd.DataFrame({f"kl {start}": b[start], f"kl {last}": b[last], f"growth {start} -> {last}": growth},
                        index=b.index)


def ratio_intervals(doc_buckets: pd.DataFrame, pairs, n_boot: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> pd.DataFrame:
    """Per pair and bucket: the ratio of mean KLs over documents, its 95% bootstrap interval
    (documents resampled with replacement) and the smallest / largest per-document ratio."""
    cols = [c for c in doc_buckets.columns if c not in ("doc", "variant")]
    rng = np.random.default_rng(seed)
    out = []
    for s, t in pairs:
        a = doc_buckets[doc_buckets["variant"] == s].set_index("doc")[cols]
        b = doc_buckets[doc_buckets["variant"] == t].set_index("doc")[cols]
        common = a.index.intersection(b.index)
        a, b = a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)
        k = len(common)
        idx = rng.integers(0, k, size=(n_boot, k))
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = a[idx].mean(1) / b[idx].mean(1)          # [n_boot, buckets]
            per_doc = a / b
        for j, c in enumerate(cols):
            bj = boot[:, j][np.isfinite(boot[:, j])]
            pj = per_doc[:, j][np.isfinite(per_doc[:, j])]
            out.append({"pair": f"{s} / {t}", "bucket": c, "docs": k,
                        "ratio": a[:, j].mean() / b[:, j].mean() if b[:, j].mean() > 0 else float("nan"),
                        "lo95": float(np.percentile(bj, 2.5)) if len(bj) else float("nan"),
                        "hi95": float(np.percentile(bj, 97.5)) if len(bj) else float("nan"),
                        "doc_min": float(pj.min()) if len(pj) else float("nan"),
                        "doc_max": float(pj.max()) if len(pj) else float("nan")})
    return pd.DataFrame(out, columns=["pair", "bucket", "docs", "ratio", "lo95", "hi95", "doc_min", "doc_max"])


def load_tables(root: str | Path) -> dict:
    """DataFrames of a results folder: ``records``, the per-document and per-variant bucket tables,
    ``positions`` (position x variant mean KL), ``ratios`` and ``intervals``.

    From ``records/`` when it holds finished records, else from the CSVs a report wrote (:data:`SOURCE_CSVS`).
    """
    root = Path(root)
    store = ResultsStore(root)
    cfg = store.read_config()
    if cfg is None:
        raise FileNotFoundError(f"{root} is not a KL results folder (no run.json); run `replayssm-quant eval --out {root}` first")
    recs = store.records()
    t = _from_records(recs, cfg) if recs else _from_csvs(root, cfg)
    variants = t["variants"]
    records = t["records"]
    records["variant"] = pd.Categorical(records["variant"], variants, ordered=True)
    t["records"] = records.sort_values(["doc", "variant"]).reset_index(drop=True)

    def mean_table(per_doc):
        cols = [c for c in per_doc.columns if c not in ("doc", "variant")]
        g = per_doc.groupby("variant", sort=False)
        df = g[cols].mean().reindex(variants)
        df.index.name = "variant"
        df.insert(0, "docs", g.size().reindex(variants).astype(int))
        return df

    buckets, quarts = mean_table(t["doc_buckets"]), mean_table(t["doc_quartiles"])
    pairs = ratio_pairs(variants)
    bcols = [c for c in buckets.columns if c != "docs"]
    ratios = pd.DataFrame([[buckets.loc[s, c] / buckets.loc[p, c] if buckets.loc[p, c] > 0 else float("nan")
                            for c in bcols] for s, p in pairs],
                          index=pd.Index([f"{s} / {p}" for s, p in pairs], name="shared / separate"), columns=bcols)
    t.update({"config": cfg, "buckets": buckets, "quartiles": quarts, "ratios": ratios, "pairs": pairs,
              "growth": growth_table(buckets),
              "intervals": ratio_intervals(t["doc_buckets"], pairs), "batches": store.batches()})
    return t


def identical_to(series: dict[str, np.ndarray]) -> dict[str, str]:
    """``{variant: earlier variant}`` for each series equal (bit for bit) to an earlier one."""
    out, seen = {}, []
    for v, y in series.items():
        same = next((u for u in seen if np.array_equal(series[u], y)), None)
        if same is None:
            seen.append(v)
        else:
            out[v] = same
    return out


_MARKERS = ["o", "s", "^", "v", "D", "P", "X", "<", ">", "*", "h"]
_LINES = ["-", "--", "-.", ":"]


def _plain_log_ticks(axis) -> None:
    """Plain numbers (``6``, ``0.5``) on a log axis instead of ``6x10^0`` / ``6e-01`` (matplotlib still picks which
    ticks get a label)."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return f"{x:g}"

    axis.set_major_formatter(Plain(labelOnlyBase=False))
    axis.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _plots(t: dict, out: Path, per_position: bool = False) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    N = t["N"]
    ranges = log2_buckets(N)
    bx = [math.sqrt(a * b) for a, b in ranges]
    labels = [_label(r) for r in ranges]
    series = {v: t["buckets"].loc[v, labels].to_numpy(float) for v in t["variants"] if v != "fp32"}
    same = identical_to(series)
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, (v, by) in enumerate(series.items()):
        label = v + (f" (identical to {same[v]})" if v in same else "")
        line, = ax.plot(bx, np.where(by > 0, by, np.nan), marker=_MARKERS[k % len(_MARKERS)],
                        ls=_LINES[k % len(_LINES)], label=label, lw=1.5,
                        mfc="none" if v in same else None, ms=8 if v in same else 5)
        if per_position:
            y = t["positions"][v].to_numpy(float)
            ax.plot(np.arange(1, len(y) + 1), np.where(y > 0, y, np.nan), color=line.get_color(), alpha=0.2, lw=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_xlabel("decode position t (tokens after prefill; log2-bucket centres)")
    ax.set_ylabel("mean KL(p_fp32 || p_spec) [nats]")
    ax.set_title(f"{t['config'].get('model')}: KL vs position ({t['records']['doc'].nunique()} documents)"
                 + ("; faint: per position" if per_position else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "kl_vs_position.png", dpi=120)
    plt.close(fig)
    files = ["kl_vs_position.png"]
    if len(t["ratios"]):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        iv = t["intervals"]
        for k, (name, row) in enumerate(t["ratios"].iterrows()):
            r = iv[iv["pair"] == name].set_index("bucket").reindex(labels)
            y = row[labels].to_numpy(float)
            err = np.vstack([np.clip(y - r["lo95"].to_numpy(float), 0, None), np.clip(r["hi95"].to_numpy(float) - y, 0, None)])
            ax.errorbar(bx, y, yerr=np.nan_to_num(err), marker=_MARKERS[k % len(_MARKERS)], ls=_LINES[k % len(_LINES)],
                        capsize=3, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_ticks(ax.xaxis)
        _plain_log_ticks(ax.yaxis)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xlabel("decode position t (log2-bucket centre)")
        ax.set_ylabel("mean KL shared / mean KL separate")
        ax.set_title("How much lower KL the separate checkpoint gives\n(bars: 95% bootstrap interval over documents)",
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "ratio_vs_position.png", dpi=120)
        plt.close(fig)
        files.append("ratio_vs_position.png")
    return files


def _md(df: pd.DataFrame, fmt: str = "{:.3g}") -> str:
    return df.to_markdown(floatfmt=".3g") if _has_tabulate() else "```\n" + df.to_string(float_format=fmt.format) + "\n```"


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


#: fewer documents than this: the interval over documents is called rough
FEW_DOCS = 8


def flushes_seen(cfg: dict) -> bool:
    """Whether any decode output can show a flush: the first flush happens after ``window`` decode steps."""
    return int(cfg.get("tokens", 0)) > int(cfg.get("window", 16))


def headline(t: dict) -> str:
    """The shared nvfp4+sr / separate nvfp4/fp8+sr ratio in the longest bucket (if both ran), with its
    interval over documents and what the run can and cannot show."""
    s, p = HEADLINE
    cfg = t["config"]
    last = [c for c in t["buckets"].columns if c != "docs"][-1]
    if s not in t["buckets"].index or p not in t["buckets"].index:
        return f"(the headline ratio needs both {s} and {p} among the variants)"
    a, b = t["buckets"].loc[s, last], t["buckets"].loc[p, last]
    ratio = a / b if b > 0 else float("inf")
    iv = t["intervals"]
    r = iv[(iv["pair"] == f"{s} / {p}") & (iv["bucket"] == last)].iloc[0]
    N, L, k = int(cfg.get("tokens", t["N"])), int(cfg.get("window", 16)), int(r["docs"])
    nums = (f"In the longest bucket (positions {last}), mean KL of shared {s} is {a:.4g} nats and of separate "
            f"{p} is {b:.4g} nats")
    if not flushes_seen(cfg):
        return (f"**No flush happened during decoding** (--tokens {N} <= --window {L}): every output read the "
                f"state cast once after prefill, so shared and separate differ only in how that one cast rounds "
                f"(stochastically for {s}, to nearest for the separate read copy), not in what the dual checkpoint "
                f"is for. {nums}: ratio {ratio:.3g}x, which says nothing about Algorithm 3. Rerun with --tokens "
                f"well above --window (many flushes) to measure it.")
    spread = (f"95% bootstrap interval over the {k} documents {r['lo95']:.3g}-{r['hi95']:.3g}x; per-document "
              f"ratios {r['doc_min']:.3g}-{r['doc_max']:.3g}x")
    lines = [f"{nums}: ratio **{ratio:.3g}x** ({spread}). The paper reports 13-36x on Qwen3.5-4B at long lengths.",
             "",
             f"What this run can show: {N // L} flushes per document (window L={L}) and positions up to "
             f"t = {N} only (each document is cut at --tokens {N}); a growth of the ratio beyond that is not "
             "measured."]
    if k < FEW_DOCS:
        lines.append(f"Only {k} documents: the interval is rough; use --docs {2 * FEW_DOCS} or more for a firmer one.")
    return "\n".join(lines)


def _growth_section(t: dict) -> str:
    g = t["growth"]
    if not len(g):
        return f"(needs decode positions beyond bucket {GROWTH_FROM}: run with --tokens 64 or more)"
    s = HEADLINE[0]
    col = g.columns[-1]
    lead = (f"Shared {s}: mean KL grows **{g.loc[s, col]:.3g}x** from positions {GROWTH_FROM} (the first bucket after "
            f"the first flush at L=16) to the longest bucket. " if s in g.index else "")
    return (lead + "Per variant (a growing KL means rounding error that builds up in the recurrent state; "
            "flat means it dies out between flushes):\n\n" + _md(g))


_EXEC_TEXT = {
    "chunked": ("chunked (replay variants L tokens per model forward, exact to the step path up to fp32 "
                "reassociation; conventional variants on the step path, DESIGN.md sec. 3)"),
    "chunked-all": ("chunked-all (every variant L tokens per model forward; conventional states stepped token by "
                    "token inside each SSM layer)"),
    "step": "step (one token per model forward)",
}


def _exec_line(cfg: dict) -> str:
    """The execution mode(s) of the folder's calls (``exec``: one, or several joined by ", " when a resumed call
    ran in another mode)."""
    modes = [m for m in str(cfg.get("exec") or "").split(", ") if m]
    if not modes:
        return "not recorded (step: one token per forward)."
    text = "; then ".join(_EXEC_TEXT.get(m, m) for m in modes)
    return text + (" (the calls that made this folder's records ran in these modes in turn)." if len(modes) > 1
                   else ".")


def _memory_line(cfg: dict) -> str:
    from .peak_memory import gib

    mem = cfg.get("memory")
    if not mem:
        return "not recorded."
    parts = [f"{ph} {gib(mem[ph].get('peak_allocated_bytes'))} allocated, {gib(mem[ph].get('peak_rss_bytes'))} RSS"
             for ph in ("load", "prefill", "decode") if ph in mem]
    return "; ".join(parts) + f" ({mem.get('note', '')})."


def _stats_section(t: dict, last: str) -> str:
    if t["stats"] is None:
        return "(not available: the records predate the top-1 / delta-p metrics)"
    table = _md(compact(t["stats"], last))
    return (table + "\n\nSE: standard error of the mean over the bucket's (document, position) samples (positions of "
            "a document are correlated: it understates the spread between documents). same top-1: the spec's argmax "
            "is the reference's. dp: p_spec(true token) - p_fp32(true token), percentage points. PPL ratio: "
            "exp(mean NLL_spec - mean NLL_fp32). Every bucket, with the KL percentiles (median, 90, 95, 99, 99.9, "
            "max) and mean dp: stats.csv.")


def build_report(root: str | Path, out: str | Path | None = None, per_position: bool = False) -> Path:
    """Write the CSVs, plots and ``report.md`` of ``root`` into ``out`` (default ``root``); returns the markdown path.

    Args:
        per_position: also draw the per-position mean KL (faint lines) in ``kl_vs_position.png``.

    Raises:
        ValueError: ``out`` cannot be written (checked before any work).
    """
    import os

    root = Path(root)
    dest = root if out is None else Path(out)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"report output {str(dest)!r} is a file; pass a folder")
    if dest.is_dir() and not os.access(dest, os.W_OK | os.X_OK):
        hint = "pass --out OTHER_FOLDER to write the report elsewhere" if out is None else "pass a writable folder"
        raise ValueError(f"{dest} is not writable; {hint}")
    t = load_tables(root)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create the report folder {dest} ({e.strerror}); pass a writable folder") from None
    cfg = t["config"]
    if dest.resolve() != root.resolve():   # the settings go with the CSVs: `report DEST` can rebuild from them
        import shutil

        shutil.copyfile(root / "run.json", dest / "run.json")
    t["records"].to_csv(dest / "results.csv", index=False, float_format="%.6g")
    # per-document tables: full precision, so a report rebuilt from them equals the one from the records
    t["doc_buckets"].to_csv(dest / "doc_buckets.csv", index=False, float_format="%.17g")
    t["doc_quartiles"].to_csv(dest / "doc_quartiles.csv", index=False, float_format="%.17g")
    t["positions"].to_csv(dest / "positions.csv", float_format="%.6g")
    t["buckets"].to_csv(dest / "buckets.csv", float_format="%.6g")
    t["quartiles"].to_csv(dest / "quartiles.csv", float_format="%.6g")
    t["ratios"].to_csv(dest / "ratios.csv", float_format="%.6g")
    if len(t["growth"]):
        t["growth"].to_csv(dest / "growth.csv", float_format="%.6g")
    t["intervals"].to_csv(dest / "ratio_intervals.csv", index=False, float_format="%.6g")
    if t["stats"] is not None:
        t["stats"].to_csv(dest / "stats.csv", index=False, float_format="%.6g")
    plots = _plots(t, dest, per_position)
    from .data import describe
    from .decode import parse_variant

    summ = t["records"].groupby("variant", observed=True).agg(docs=("doc", "count"), mean_kl=("mean_kl", "mean"),
                                                              mean_nll=("mean_nll", "mean"))
    last = [c for c in t["buckets"].columns if c != "docs"][-1]
    summ[f"kl positions {last}"] = t["buckets"][last]
    bpe = []
    for v in summ.index:       # a variant's label: its mode, its own window (replay@L:) or the run's, its spec
        var = parse_variant(v)
        bpe.append(var.spec.step_bytes_per_element(var.mode, var.window or cfg.get("window", 16)))
    summ["state B/elem/step"] = bpe
    summ.to_csv(dest / "summary.csv", float_format="%.6g")
    written = ["summary.csv (the table above)"] + (["stats.csv"] if t["stats"] is not None else []) + (
        ["growth.csv"] if len(t["growth"]) else [])
    b = t["batches"]
    rows_tok = sum(x["rows"] * x["decode_steps"] for x in b)
    secs = sum(x["decode_seconds"] for x in b)
    lines = [
        f"# KL report: {cfg.get('model')}",
        "",
        (f"Command: `{cfg.get('command', '')}`  " if len(cfg.get("commands", [])) < 2 else
         "Commands (this folder's records were made by each in turn): "
         + "; ".join(f"`{c}`" for c in cfg["commands"]) + "  "),
        f"Generated {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; run settings: prefill "
        f"{cfg.get('prefill')}, teacher-forced tokens {cfg.get('tokens')}, documents {t['records']['doc'].nunique()}, "
        f"window L={cfg.get('window')}, seed {cfg.get('seed')}.  ",
        f"Data: {describe(cfg.get('data'))}.  ",
        f"Model: {cfg.get('model')} (content hash {cfg.get('model_hash', 'not recorded')}); weights "
        f"{cfg.get('weights_dtype', 'not recorded')} (--dtype {cfg.get('dtype', 'not recorded')}); the SSM state of "
        f"the fp32 reference is float32 whatever the weights.  ",
        f"About the model: {cfg.get('model_card', 'not recorded')}  ",
        f"Execution: {_exec_line(cfg)}  ",
        f"Peak memory: {_memory_line(cfg)}  ",
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
        "## Growth over position",
        "",
        _growth_section(t),
        "",
        "## Mean KL per position quartile",
        "",
        _md(t["quartiles"]),
        "",
        "## Statistics at positions " + last + " (llama.cpp's KL set)",
        "",
        _stats_section(t, last),
        "",
        "## Shared / separate ratio per bucket",
        "",
        _md(t["ratios"]) if len(t["ratios"]) else "(no shared/separate pair with the same read format among the variants)",
        "",
        ("Each ratio's 95% bootstrap interval over documents and its per-document range are in "
         "ratio_intervals.csv." if len(t["ratios"]) else ""),
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
        "Files: results.csv (per document and variant), doc_buckets.csv and doc_quartiles.csv (per document, "
        "variant and position range), positions.csv (mean per position), buckets.csv, quartiles.csv, ratios.csv, "
        f"ratio_intervals.csv, {', '.join(written)}, run.json (the settings); "
        "`replayssm-quant report DIR` rebuilds this report from them. The run folder's "
        "records/<doc>/<variant>.npz hold the per-position arrays (needed to resume, not to report).",
    ]
    md = dest / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md
