"""kl_stats: per-position metrics and bucket statistics, checked on hand-made records (values worked out by hand)."""

import math

import numpy as np
import pytest
import torch

from replayssm_quant.eval.kl_stats import STAT_COLUMNS, bucket_stats, compact, position_metrics, stats_table


def test_position_metrics_by_hand():
    # vocab 2, one document, two positions; variant 0 = reference
    ref = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)   # p = (1/2, 1/2); softmax(1, 0)
    var = torch.tensor([[math.log(3.0), 0.0], [0.0, 2.0]], dtype=torch.float64)   # q = (3/4, 1/4); softmax(0, 2)
    logits = torch.stack([ref, var])[:, None]                    # [n=2, D=1, T=2, vocab=2]
    targets = torch.tensor([[1, 0]])
    m = position_metrics(logits, targets)
    assert set(m) == {"kl", "nll", "top1", "dp"} and m["kl"].shape == (2, 1, 2) and m["kl"].dtype == torch.float64
    # position 1: KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3); true token 1: nll = ln 4, dp = 1/4 - 1/2; same argmax (0)
    assert m["kl"][1, 0, 0].item() == pytest.approx(0.5 * math.log(4 / 3), rel=1e-12)
    assert m["nll"][1, 0, 0].item() == pytest.approx(math.log(4.0), rel=1e-12)
    assert m["dp"][1, 0, 0].item() == pytest.approx(-0.25, rel=1e-12)
    assert m["top1"][1, 0, 0].item() == 1.0
    # position 2: argmax 0 vs 1 differ; true token 0: p_ref = e/(1+e), p_var = 1/(1+e^2)
    e = math.e
    assert m["top1"][1, 0, 1].item() == 0.0
    assert m["dp"][1, 0, 1].item() == pytest.approx(1 / (1 + e * e) - e / (1 + e), rel=1e-12)
    p, q = np.array([e, 1]) / (1 + e), np.array([1, e * e]) / (1 + e * e)
    assert m["kl"][1, 0, 1].item() == pytest.approx(float(np.sum(p * np.log(p / q))), rel=1e-12)
    assert torch.all(m["kl"][0] == 0) and torch.all(m["dp"][0] == 0) and torch.all(m["top1"][0] == 1)


KL = np.array([[0.1, 0.2, 0.3, 0.4], [0.0, 0.4, 0.2, 1.0]])
TOP1 = np.array([[1, 0, 1, 1], [1, 1, 1, 0]])
DP = np.array([[0.1, -0.2, 0.0, 0.0], [-0.1, 0.1, 0.2, -0.2]])
NLL_REF = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
NLL = NLL_REF + np.array([[math.log(2.0), 0.0, 0.0, 0.0], [0.0, 0.3, 0.0, 0.3]])


def test_bucket_stats_by_hand():
    df = bucket_stats(KL, NLL, NLL_REF, TOP1, DP, [(1, 1), (2, 4)])
    assert list(df.columns) == list(STAT_COLUMNS) and list(df.index) == ["1", "2-4"]
    a, b = df.loc["1"], df.loc["2-4"]
    # bucket 1: KL samples (0.1, 0.0): mean 0.05, sample std 0.05 * sqrt(2), SE 0.05; median 0.05, max 0.1
    assert a["samples"] == 2 and a["mean_kl"] == pytest.approx(0.05) and a["se_kl"] == pytest.approx(0.05)
    assert a["kl_p50"] == pytest.approx(0.05) and a["kl_max"] == pytest.approx(0.1)
    assert a["same_top1_pct"] == pytest.approx(100.0)
    assert a["dp_mean_pct"] == pytest.approx(0.0, abs=1e-12) and a["dp_rms_pct"] == pytest.approx(10.0)
    assert a["ppl_ratio"] == pytest.approx(math.sqrt(2.0))          # exp(mean(ln 2, 0))
    # bucket 2-4: KL (0.2, 0.3, 0.4, 0.4, 0.2, 1.0): mean 2.5/6, median 0.35, max 1; top-1 4 of 6
    assert b["samples"] == 6 and b["mean_kl"] == pytest.approx(2.5 / 6) and b["kl_p50"] == pytest.approx(0.35)
    assert b["kl_max"] == pytest.approx(1.0) and b["same_top1_pct"] == pytest.approx(400 / 6)
    k = np.array([0.2, 0.3, 0.4, 0.4, 0.2, 1.0])
    assert b["se_kl"] == pytest.approx(math.sqrt(np.sum((k - k.mean()) ** 2) / 5 / 6))
    assert b["kl_p99"] == pytest.approx(0.4 + 0.95 * 0.6)              # linear: between the 5th and 6th value
    d = np.array([-0.2, 0.0, 0.0, 0.1, 0.2, -0.2])
    assert b["dp_mean_pct"] == pytest.approx(100 * d.mean()) and b["dp_rms_pct"] == pytest.approx(100 * math.sqrt(0.13 / 6))
    assert b["ppl_ratio"] == pytest.approx(math.exp(0.6 / 6))


def test_stats_table_pairs_with_the_reference_and_needs_every_metric():
    rec = lambda i, nll: {"kl": KL[i], "nll": nll[i], "top1": TOP1[i], "dp": DP[i]}   # noqa: E731
    arrays = {("d0", "fp32"): rec(0, NLL_REF), ("d1", "fp32"): rec(1, NLL_REF),
              ("d0", "nvfp4+sr"): rec(0, NLL), ("d1", "nvfp4+sr"): rec(1, NLL),
              ("d2", "nvfp4+sr"): rec(0, NLL)}       # no reference record for d2: left out
    t = stats_table(arrays, ["nvfp4+sr"], [(1, 1), (2, 4)])
    assert list(t["variant"]) == ["nvfp4+sr"] * 2 and list(t["docs"]) == [2, 2]
    assert t.loc[1, "ppl_ratio"] == pytest.approx(math.exp(0.6 / 6))
    c = compact(t, "2-4")
    assert c.loc["nvfp4+sr", "same top-1 %"] == pytest.approx(400 / 6)
    assert c.loc["nvfp4+sr", "mean KL +- SE"].startswith("0.417 +- ")
    del arrays[("d0", "nvfp4+sr")]["dp"]
    assert stats_table(arrays, ["nvfp4+sr"], [(1, 1)]) is None
