"""KL harness: batched KL equals per-variant sessions, resume equals an uninterrupted run, report tables."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from replayssm_quant.eval.adapters.tiny import tiny_model
from replayssm_quant.eval.data import Document
from replayssm_quant.eval.decode import DecodeSession, parse_variant
from replayssm_quant.eval.kl import KLSettings, kl_batch, run_kl, with_reference
from replayssm_quant.eval.report import build_report, load_tables, log2_buckets, quartiles
from replayssm_quant.eval.results import ResultsStore

P, N = 6, 12


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen3_5", seed=3)


def _docs(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Document(f"text{i}#0", torch.randint(0, 256, (P + N + 1,), generator=g)) for i in range(n)]


@pytest.mark.parametrize("exec_mode", ["chunked", "step", "chunked-all"])
def test_kl_batch_matches_separate_sessions(model, exec_mode):
    """KL, NLL, top-1 agreement and delta-p from one batched run (chunked: the replay variants L tokens per
    forward, the conventional one in a step session; chunked-all: the conventional one too, stepped inside
    the layers) == computed by hand from one step session per variant."""
    docs = _docs(2)
    tokens = torch.stack([d.tokens for d in docs])
    variants = with_reference([parse_variant(v) for v in ["nvfp4+sr", "conventional:fp8+sr", "nvfp4/fp8+sr"]])
    st = KLSettings(prefill=P, tokens=N, window=4, seed=5, backend="torch", exec_mode=exec_mode)
    res, secs = kl_batch(model, tokens, variants, st, seed=5)
    kl, nll = res["kl"], res["nll"]
    assert all(res[m].shape == (4, 2, N) for m in ("kl", "nll", "top1", "dp")) and secs > 0
    assert np.all(kl[0] == 0) and np.all(res["dp"][0] == 0) and np.all(res["top1"][0] == 1)
    assert kl.min() >= -1e-12        # float64 divergence: no negative rounding noise
    per = []
    for v in variants:
        with DecodeSession(model, [v], window=4, seed=5, backend="torch") as s:
            s.prefill(tokens[:, :P])
            per.append(torch.stack([torch.log_softmax(s.step(tokens[:, P + t]), -1) for t in range(N)], 1))
    ref = per[0]
    true = tokens[:, P + 1:P + N + 1, None]
    for i in range(1, 4):
        want = (ref.exp() * (ref - per[i])).sum(-1).numpy()
        np.testing.assert_allclose(kl[i], want, rtol=1e-3, atol=1e-6)
        assert kl[i].mean() > 1e-6, f"{variants[i].label}: no KL at all"
        want_dp = (per[i].gather(2, true).exp() - ref.gather(2, true).exp())[..., 0].numpy()
        np.testing.assert_allclose(res["dp"][i], want_dp, rtol=1e-3, atol=1e-6)
        np.testing.assert_array_equal(res["top1"][i], (per[i].argmax(-1) == ref.argmax(-1)).numpy())
    want_nll = -per[2].gather(2, true)[..., 0].numpy()
    np.testing.assert_allclose(nll[2], want_nll, rtol=1e-4, atol=1e-5)


def test_resume_equals_uninterrupted(model, tmp_path):
    docs = _docs(3, seed=1)
    variants = [parse_variant(v) for v in ["fp8+sr", "nvfp4/fp8+sr"]]
    st = KLSettings(prefill=P, tokens=N, window=4, seed=2, batch_docs=2, backend="torch")
    cfg = {"model": "tiny", "data": None, "text_field": "text", "prefill": P, "tokens": N, "window": 4, "seed": 2,
           "batch_docs": 2, "docs": 3, "variants": [v.label for v in with_reference(variants)]}
    full = ResultsStore(tmp_path / "full")
    full.open(cfg)
    run_kl(model, docs, variants, st, full, progress=False)
    part = ResultsStore(tmp_path / "part")
    part.open(cfg)
    s1 = run_kl(model, docs, variants, st, part, progress=False, stop_after_batches=1)  # "interrupted"
    assert s1["records_written"] == 2 * 3
    # a batch's file carries the peak memory of the phases so far (a run cut later keeps it)
    assert {"prefill", "decode"} <= set(part.batches()[0]["memory"])
    # a half-written record (npz but no json) counts as not done
    (tmp_path / "part" / "records" / "d0002").mkdir(parents=True)
    (tmp_path / "part" / "records" / "d0002" / "fp8+sr.npz").write_bytes(b"garbage")
    s2 = run_kl(model, docs, variants, st, part, progress=False)
    assert s2["batches"] == 1 and s2["records_written"] == 3
    assert run_kl(model, docs, variants, st, part, progress=False)["batches"] == 0   # nothing left
    build_report(tmp_path / "full")
    build_report(tmp_path / "part")
    a = (tmp_path / "full" / "results.csv").read_text()
    assert a == (tmp_path / "part" / "results.csv").read_text()
    assert (tmp_path / "full" / "buckets.csv").read_text() == (tmp_path / "part" / "buckets.csv").read_text()
    assert len(pd.read_csv(tmp_path / "full" / "results.csv")) == 9
    # another setting in the same folder is refused
    with pytest.raises(ValueError, match="other settings"):
        part.open(dict(cfg, prefill=P + 1))


def test_report_tables(tmp_path):
    """Report numbers come from the stored arrays: bucket means, quartiles, shared/separate ratio."""
    store = ResultsStore(tmp_path)
    labels = ["fp32", "nvfp4+sr", "nvfp4/fp8+sr", "conventional:fp8+sr"]
    store.open({"model": "m", "prefill": 4, "tokens": 10, "window": 16, "seed": 0, "batch_docs": 2,
                "variants": labels, "docs": 2})
    rng = np.random.default_rng(0)
    arrays = {}
    for d in range(2):
        for lab in labels:
            v = parse_variant(lab)
            kl = np.zeros(10) if v.is_reference else rng.uniform(0.1, 1.0, 10) * (10 if lab == "nvfp4+sr" else 1)
            arrays[(d, lab)] = kl
            store.write_record(d, v.slug, {"doc": f"d{d:04d}", "doc_id": f"x#{d}", "variant": lab,
                                           "spec": v.spec.text, "mode": v.mode, "batch": 0, "mean_kl": kl.mean(),
                                           "mean_nll": 1.0}, kl, np.ones(10))
    store.write_batch(0, {"rows": 8, "decode_steps": 10, "decode_seconds": 2.0, "device": "cpu"})
    assert log2_buckets(10) == [(1, 1), (2, 3), (4, 7), (8, 10)]
    assert log2_buckets(8) == [(1, 1), (2, 3), (4, 8)]
    assert quartiles(10) == [(1, 2), (3, 5), (6, 8), (9, 10)]
    t = load_tables(tmp_path)
    want = np.mean(np.concatenate([arrays[(d, "nvfp4+sr")][7:10] for d in range(2)]))
    assert t["buckets"].loc["nvfp4+sr", "8-10"] == pytest.approx(want)
    want_q = np.mean(np.concatenate([arrays[(d, "nvfp4/fp8+sr")][2:5] for d in range(2)]))
    assert t["quartiles"].loc["nvfp4/fp8+sr", "3-5"] == pytest.approx(want_q)
    assert list(t["ratios"].index) == ["nvfp4+sr / nvfp4/fp8+sr"]
    sep = np.mean(np.concatenate([arrays[(d, "nvfp4/fp8+sr")][7:10] for d in range(2)]))
    assert t["ratios"].loc["nvfp4+sr / nvfp4/fp8+sr", "8-10"] == pytest.approx(want / sep)
    md = build_report(tmp_path).read_text()
    assert f"{want / sep:.3g}x" in md and "tokens/s" in md
    for f in ("results.csv", "buckets.csv", "quartiles.csv", "ratios.csv", "kl_vs_position.png", "ratio_vs_position.png"):
        assert (tmp_path / f).stat().st_size > 0
    cfg = json.loads((tmp_path / "run.json").read_text())
    assert cfg["variants"] == labels


def _fake_run(root, tokens=10, window=16, docs=3, identical=False):
    """A results folder with random per-position KL arrays (no model)."""
    store = ResultsStore(root)
    labels = ["fp32", "nvfp4+sr", "nvfp4/fp8+sr", "nvfp4/fp16"]
    store.open({"model": "m", "prefill": 4, "tokens": tokens, "window": window, "seed": 0, "batch_docs": 2,
                "variants": labels, "docs": docs})
    rng = np.random.default_rng(1)
    for d in range(docs):
        sep = rng.uniform(0.1, 1.0, tokens)
        for lab in labels:
            v = parse_variant(lab)
            kl = (np.zeros(tokens) if v.is_reference else sep if identical and lab != "nvfp4+sr"
                  else rng.uniform(0.1, 1.0, tokens) * (10 if lab == "nvfp4+sr" else 1))
            store.write_record(d, v.slug, {"doc": f"d{d:04d}", "doc_id": f"x#{d}", "variant": lab, "spec": v.spec.text,
                                           "mode": v.mode, "batch": 0, "mean_kl": kl.mean(), "mean_nll": 1.0},
                               kl, np.ones(tokens))
    store.write_batch(0, {"rows": 4 * docs, "decode_steps": tokens, "decode_seconds": 2.0, "device": "cpu"})
    return store


def test_report_rebuilds_from_csvs_without_records(tmp_path):
    """A committed report folder has the CSVs but no records/: `report` rebuilds the same tables from them."""
    import shutil

    _fake_run(tmp_path / "r", tokens=40, window=4)
    build_report(tmp_path / "r")
    before = {f: (tmp_path / "r" / f).read_text() for f in
              ("results.csv", "doc_buckets.csv", "buckets.csv", "quartiles.csv", "ratios.csv", "ratio_intervals.csv",
               "positions.csv")}
    md_before = (tmp_path / "r" / "report.md").read_text()
    shutil.rmtree(tmp_path / "r" / "records")
    build_report(tmp_path / "r")
    for f, text in before.items():
        assert (tmp_path / "r" / f).read_text() == text, f
    md = (tmp_path / "r" / "report.md").read_text()
    drop = lambda s: [ln for ln in s.splitlines() if not ln.startswith("Generated")]   # noqa: E731
    assert drop(md) == drop(md_before)
    (tmp_path / "r" / "doc_buckets.csv").unlink()
    with pytest.raises(ValueError, match="lacks doc_buckets.csv"):
        load_tables(tmp_path / "r")


def test_headline_says_when_no_flush_happened(tmp_path):
    """--tokens <= --window: no flush during decoding, so no bold shared/separate ratio."""
    _fake_run(tmp_path / "a", tokens=10, window=16)
    md = build_report(tmp_path / "a").read_text()
    head = md.split("## Headline")[1].split("##")[0]
    assert "No flush happened during decoding" in head and "says nothing about Algorithm 3" in head
    assert "x**" not in head


def test_headline_gives_interval_over_documents(tmp_path):
    _fake_run(tmp_path / "b", tokens=40, window=4, docs=3)
    t = load_tables(tmp_path / "b")
    iv = t["intervals"].set_index(["pair", "bucket"]).loc[("nvfp4+sr / nvfp4/fp8+sr", "32-40")]
    db = t["doc_buckets"].set_index(["variant", "doc"])["32-40"]
    per_doc = db.loc["nvfp4+sr"] / db.loc["nvfp4/fp8+sr"]
    assert iv["doc_min"] == pytest.approx(per_doc.min()) and iv["doc_max"] == pytest.approx(per_doc.max())
    assert iv["lo95"] <= iv["ratio"] <= iv["hi95"] and iv["lo95"] < iv["hi95"]
    head = build_report(tmp_path / "b").read_text().split("## Headline")[1].split("##")[0]
    assert f"**{iv['ratio']:.3g}x**" in head and f"{iv['lo95']:.3g}-{iv['hi95']:.3g}x" in head
    assert "10 flushes per document" in head and "cut at --tokens 40" in head and "Only 3 documents" in head


def test_plots_name_identical_series_and_use_plain_ticks(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from replayssm_quant.eval import report as R

    _fake_run(tmp_path / "c", tokens=40, window=4, identical=True)
    t = load_tables(tmp_path / "c")
    assert R.identical_to({"a": np.ones(3), "b": np.ones(3) * 2, "c": np.ones(3)}) == {"c": "a"}
    figs = []
    real_close = plt.close
    plt.close = lambda fig=None: figs.append(fig)
    try:
        R._plots(t, tmp_path / "c")
    finally:
        plt.close = real_close
    kl_ax, ratio_ax = figs[0].axes[0], figs[1].axes[0]
    legend = [x.get_text() for x in kl_ax.get_legend().get_texts()]
    assert "nvfp4/fp16 (identical to nvfp4/fp8+sr)" in legend
    assert len(kl_ax.lines) == 3                                    # bucket means only: no per-position lines
    styles = {(ln.get_marker(), ln.get_linestyle()) for ln in kl_ax.lines}
    assert len(styles) == 3
    fmt = ratio_ax.yaxis.get_major_formatter()
    fmt.set_locs([1, 10])
    assert fmt(6.0) in ("6", "") and fmt(10.0) == "10"
    minor = ratio_ax.yaxis.get_minor_formatter()
    minor.set_locs([0.4, 0.6, 2, 3])
    assert all("e" not in minor(x) and "times" not in minor(x) for x in (0.4, 0.6, 2.0, 3.0))
    assert len(ratio_ax.containers) == 2 and all(c.has_yerr for c in ratio_ax.containers)   # error bars
    for f in figs:
        real_close(f)


def test_growth_from_bucket_16_31_to_the_longest(tmp_path):
    """growth.csv and the report's growth section: mean KL of the longest bucket over that of 16-31 per
    variant (fp32 left out), from the stored arrays; a run too short for bucket 16-31 says so."""
    _fake_run(tmp_path / "g", tokens=70, window=4, docs=2)
    t = load_tables(tmp_path / "g")
    kl = {}
    for meta, arrays in ResultsStore(tmp_path / "g").records():
        kl.setdefault(meta["variant"], []).append(arrays["kl"])
    assert list(t["buckets"].columns[-2:]) == ["32-63", "64-70"]
    g = t["growth"]
    assert "fp32" not in g.index and list(g.index) == ["nvfp4+sr", "nvfp4/fp8+sr", "nvfp4/fp16"]
    for v in g.index:   # position t is array index t-1
        want = np.mean([a[63:70] for a in kl[v]]) / np.mean([a[15:31] for a in kl[v]])
        assert g.loc[v, "growth 16-31 -> 64-70"] == pytest.approx(want)
    md = build_report(tmp_path / "g").read_text()
    sec = md.split("## Growth over position")[1].split("\n## ")[0]
    assert f"grows **{g.loc['nvfp4+sr', 'growth 16-31 -> 64-70']:.3g}x** from positions 16-31" in sec
    assert (tmp_path / "g" / "growth.csv").stat().st_size > 0
    _fake_run(tmp_path / "s", tokens=20, window=4, docs=2)
    assert "run with --tokens 64 or more" in build_report(tmp_path / "s").read_text()
