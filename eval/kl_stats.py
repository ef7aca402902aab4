"""Per-position metrics of a teacher-forced run and their statistics per position bucket (DESIGN.md sec. 6).

Per position (from the logits of every variant, row 0 the fp32 reference, and the true next token):

* ``kl``   KL(p_fp32 || p_spec) in nats over the full vocabulary;
* ``nll``  -log p_spec(true token);
* ``top1`` 1 where the spec's argmax equals the reference's, else 0;
* ``dp``   p_spec(true token) - p_fp32(true token).

Per position bucket (the set llama.cpp's ``perplexity --kl-divergence`` prints): mean KL with its standard
error, KL percentiles (median, 90, 95, 99, 99.9, max), same top-1 token as the reference (%), delta-p of the
true token (mean and RMS, in percentage points), and the perplexity ratio PPL(spec) / PPL(fp32) =
exp(mean(nll_spec - nll_fp32)) over the bucket's (document, position) pairs.

The standard error treats the bucket's (document, position) samples as independent (as llama.cpp does);
positions of one document are correlated, so it understates the spread between documents.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: arrays of one (document, variant) record, all ``[N]``
METRICS = ("kl", "nll", "top1", "dp")
#: KL percentiles of the bucket statistics
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9, 100.0)
#: columns of :func:`bucket_stats`, in order
STAT_COLUMNS = ("samples", "mean_kl", "se_kl", "kl_p50", "kl_p90", "kl_p95", "kl_p99", "kl_p99.9", "kl_max",
                "same_top1_pct", "dp_mean_pct", "dp_rms_pct", "ppl_ratio")


def position_metrics(logits, targets) -> dict:
    """Per-position metrics of every variant against variant 0 (the fp32 reference).

    Args:
        logits: ``[n, D, T, vocab]`` (any float dtype; computed in float64: in fp32 the cancellation in
            ``sum p (log p - log q)`` leaves noise of ~1e-8 nats that would swamp the KLs of 16-bit states).
        targets: int64 ``[D, T]``, the true next token of each position.

    Returns:
        ``{"kl", "nll", "top1", "dp"}`` -> float64 ``[n, D, T]`` on the logits' device (``kl[0]``, ``dp[0]`` are 0,
        ``top1[0]`` is 1).
    """
    import torch

    n, D, T, _ = logits.shape
    lp = torch.log_softmax(logits.double(), -1)
    ref = lp[0]
    kl = (ref.exp()[None] * (ref[None] - lp)).sum(-1)
    lp_true = lp.gather(3, targets.to(lp.device).view(1, D, T, 1).expand(n, D, T, 1))[..., 0]
    p_true = lp_true.exp()
    top1 = (lp.argmax(-1) == ref.argmax(-1)[None]).double()
    return {"kl": kl, "nll": -lp_true, "top1": top1, "dp": p_true - p_true[0:1]}


def bucket_stats(kl: np.ndarray, nll: np.ndarray, nll_ref: np.ndarray, top1: np.ndarray, dp: np.ndarray,
                 ranges: list[tuple[int, int]]) -> pd.DataFrame:
    """Statistics of one variant per position bucket.

    Args:
        kl, nll, top1, dp: ``[docs, N]`` the variant's per-position metrics (``top1`` 0/1).
        nll_ref: ``[docs, N]`` the fp32 reference's NLL at the same documents and positions.
        ranges: inclusive 1-based position ranges (e.g. ``report.log2_buckets(N)``).

    Returns:
        One row per range (index ``"lo-hi"``), columns :data:`STAT_COLUMNS`.
    """
    rows, index = [], []
    for lo, hi in ranges:
        sl = slice(lo - 1, hi)
        k = np.asarray(kl, np.float64)[:, sl].ravel()
        m = k.size
        pct = np.percentile(k, PERCENTILES)
        d = np.asarray(dp, np.float64)[:, sl].ravel()
        dn = (np.asarray(nll, np.float64)[:, sl] - np.asarray(nll_ref, np.float64)[:, sl]).ravel()
        rows.append([m, k.mean(), k.std(ddof=1) / np.sqrt(m) if m > 1 else float("nan"), *pct,
                     100.0 * np.asarray(top1, np.float64)[:, sl].mean(), 100.0 * d.mean(),
                     100.0 * np.sqrt(np.mean(d * d)), float(np.exp(dn.mean()))])
        index.append(f"{lo}" if lo == hi else f"{lo}-{hi}")
    return pd.DataFrame(rows, index=pd.Index(index, name="positions"), columns=list(STAT_COLUMNS))


def stats_table(arrays: dict, variants: list[str], ranges: list[tuple[int, int]], reference: str = "fp32"):
    """:func:`bucket_stats` of every variant, one long table (columns ``variant``, ``positions``, ...).

    Args:
        arrays: ``{(doc, variant): {"kl", "nll", "top1", "dp"} -> [N']}`` (N' >= the last range's end).
        variants: the variants to tabulate, in order (the reference among them or not).
        ranges: inclusive 1-based position ranges.

    Returns:
        The table, or ``None`` when a record lacks one of :data:`METRICS` (records written before these
        metrics existed) or the reference has no record. Each variant uses the documents it shares with the
        reference (its NLL is paired with the reference's on the same positions).
    """
    if not arrays or any(m not in a for a in arrays.values() for m in METRICS):
        return None
    N = ranges[-1][1]
    parts = []
    for v in variants:
        docs = sorted(d for d, w in arrays if w == v and (d, reference) in arrays)
        if not docs:
            continue
        def stack(m, var):
            return np.stack([np.asarray(arrays[(d, var)][m][:N], np.float64) for d in docs])
        df = bucket_stats(stack("kl", v), stack("nll", v), stack("nll", reference), stack("top1", v),
                          stack("dp", v), ranges).reset_index()
        df.insert(0, "variant", v)
        df.insert(2, "docs", len(docs))
        parts.append(df)
    return pd.concat(parts, ignore_index=True) if parts else None


def compact(stats: pd.DataFrame, positions: str) -> pd.DataFrame:
    """The report's compact view of :func:`stats_table` at one bucket: mean KL +- SE, p99, max, same top-1 %,
    RMS delta-p and the perplexity ratio per variant."""
    s = stats[stats["positions"] == positions].set_index("variant")
    return pd.DataFrame({
        "mean KL +- SE": [f"{m:.3g} +- {e:.2g}" for m, e in zip(s["mean_kl"], s["se_kl"])],
        "KL p99": s["kl_p99"], "KL max": s["kl_max"], "same top-1 %": s["same_top1_pct"],
        "RMS dp (pp)": s["dp_rms_pct"], "PPL ratio": s["ppl_ratio"]}, index=s.index)
