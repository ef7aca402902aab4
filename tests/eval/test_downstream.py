"""Quartile analysis, run names and the results folder of eval/downstream.py (no model needed)."""

import json

import pandas as pd
import pytest

from replayssm_quant.eval import downstream as ds


def _rows(model, task, run, lengths, correct):
    return [{"model": model, "task": task, "doc_id": i, "run": run, "correct": c, "gen_tokens": n}
            for i, (n, c) in enumerate(zip(lengths, correct))]


def _hand_made():
    # task A: 8 docs, fp32 lengths known; quartiles (by fp32 length):
    #   Q1 = lengths 1,2 (docs 1,5); Q2 = 3,4 (docs 3,7); Q3 = 5,6 (docs 0,6); Q4 = 7,8 (docs 4,2)
    a_len = [5, 1, 8, 3, 7, 2, 6, 4]
    rows = _rows("m", "A", "fp32", a_len, [1] * 8)
    # spec: right on Q1 (1,5), one of Q2 (3), one of Q3 (0), none of Q4 (4,2).
    # Its own lengths are different and must be ignored.
    spec_ok = {1, 5, 3, 0}
    rows += _rows("m", "A", "nvfp4+sr", [99 - n for n in a_len], [int(i in spec_ok) for i in range(8)])
    # task B: 4 docs, fp32 wrong on doc 0 (the longest); spec right everywhere.
    b_len = [40, 10, 20, 30]
    rows += _rows("m", "B", "fp32", b_len, [0, 1, 1, 1])
    rows += _rows("m", "B", "nvfp4+sr", b_len, [1, 1, 1, 1])
    return pd.DataFrame(rows)


def _get(t, task, q, run, col):
    sel = t[(t.task == task) & (t.quartile == q) & (t.run == run)]
    assert len(sel) == 1, (task, q, run)
    return sel.iloc[0][col]


def test_quartile_table_hand_made():
    t = ds.quartile_table(_hand_made())
    exp_acc = {"Q1": 100, "Q2": 50, "Q3": 50, "Q4": 0, "all": 50}
    exp_len = {"Q1": (1, 2), "Q2": (3, 4), "Q3": (5, 6), "Q4": (7, 8), "all": (1, 8)}
    for q, acc in exp_acc.items():
        assert _get(t, "A", q, "fp32", "accuracy") == 100
        assert _get(t, "A", q, "nvfp4+sr", "accuracy") == pytest.approx(acc)
        assert _get(t, "A", q, "nvfp4+sr", "delta_pp") == pytest.approx(acc - 100)
        assert _get(t, "A", q, "fp32", "delta_pp") == 0
        assert (_get(t, "A", q, "fp32", "len_min"), _get(t, "A", q, "fp32", "len_max")) == exp_len[q]
        assert _get(t, "A", q, "fp32", "n") == (8 if q == "all" else 2)
    # task B: one doc per quartile; doc 0 (len 40) is Q4, where fp32 is wrong and the spec right
    assert _get(t, "B", "Q4", "fp32", "accuracy") == 0
    assert _get(t, "B", "Q4", "nvfp4+sr", "delta_pp") == pytest.approx(100)
    assert _get(t, "B", "Q1", "nvfp4+sr", "delta_pp") == 0
    # pooled over tasks: each sample keeps its own task's quartile. Q4 = A docs 4,2 + B doc 0
    assert _get(t, "all", "Q4", "fp32", "n") == 3
    assert _get(t, "all", "Q4", "fp32", "accuracy") == pytest.approx(200 / 3)
    assert _get(t, "all", "Q4", "nvfp4+sr", "accuracy") == pytest.approx(100 / 3)
    assert _get(t, "all", "Q4", "nvfp4+sr", "delta_pp") == pytest.approx(-100 / 3)
    assert _get(t, "all", "all", "nvfp4+sr", "accuracy") == pytest.approx(100 * 8 / 12)
    p = ds.delta_pivot(t, "A")
    assert list(p.columns) == ["Q1", "Q2", "Q3", "Q4", "all"]
    assert p.loc[("m", "nvfp4+sr")].tolist() == pytest.approx([0, -50, -50, -100, -50])


def test_quartiles_equal_count_with_ties_and_uneven_sizes():
    lengths = pd.DataFrame({"model": "m", "task": "t", "doc_id": range(7), "gen_tokens": [3, 3, 3, 3, 3, 1, 9]})
    q = ds.assign_quartiles(lengths).set_index("doc_id")["quartile"]
    # order by (len, doc_id): 5, 0, 1, 2, 3, 4, 6 -> floor(4 i / 7) = 0,0,1,1,2,2,3
    assert q.to_dict() == {5: "Q1", 0: "Q1", 1: "Q2", 2: "Q2", 3: "Q3", 4: "Q3", 6: "Q4"}


def test_quartile_table_rejects_mismatched_samples():
    df = _hand_made()
    with pytest.raises(ValueError, match="does not cover the same samples"):
        ds.quartile_table(df.drop(index=df.index[(df.run == "nvfp4+sr") & (df.task == "A")][0]))
    with pytest.raises(ValueError, match="no samples of the reference run"):
        ds.quartile_table(df[df.run != "fp32"])
    with pytest.raises(ValueError, match="duplicate rows"):
        ds.quartile_table(pd.concat([df, df.iloc[:1]]))
    with pytest.raises(ValueError, match="lacks columns"):
        ds.quartile_table(df.drop(columns=["gen_tokens"]))


def test_parse_run_and_plan():
    r = ds.parse_run("conventional:FP8+SR")
    assert (r.label, r.spec.text, r.mode, r.slug) == ("conventional:fp8+sr", "fp8+sr", "conventional",
                                                      "conventional-fp8+sr")
    assert ds.parse_run("nvfp4/fp8+sr").mode == "replay"
    assert ds.parse_run("replay:nvfp4/fp16").label == "nvfp4/fp16"
    assert ds.parse_run("fp8+sr", default_mode="conventional").label == "conventional:fp8+sr"
    with pytest.raises(ValueError, match="unknown decode mode 'fast'"):
        ds.parse_run("fast:fp8")
    with pytest.raises(ValueError, match="shared spec"):
        ds.parse_run("conventional:nvfp4/fp8")
    with pytest.raises(ValueError, match="valid forms"):
        ds.parse_run("fp7")
    names = [r.label for r in ds.plan_runs(["nvfp4+sr", "fp32", "nvfp4+sr", "conventional:fp8+sr"])]
    assert names == ["fp32", "nvfp4+sr", "conventional:fp8+sr"]


def test_samples_from_lm_eval_uses_generation_log():
    lm_samples = {"t": [
        {"doc_id": 0, "arguments": {"gen_args_0": {"arg_0": "ctx a", "arg_1": {"until": ["\n"]}}},
         "resps": [["x"]], "filtered_resps": ["x"], "target": "x", "exact_match": 1.0},
        {"doc_id": 1, "arguments": [["ctx b", {"until": ["\n"]}]],
         "resps": [["y"]], "filtered_resps": ["y"], "target": "z", "exact_match": 0.0},
    ]}
    log = [{"context": "ctx b", "gen_tokens": 7}, {"context": "ctx a", "gen_tokens": 3}]
    rows = ds.samples_from_lm_eval("m", "fp32", lm_samples, log)
    assert [(r["doc_id"], r["gen_tokens"], r["correct"], r["response"]) for r in rows] == \
        [(0, 3, 1.0, "x"), (1, 7, 0.0, "y")]
    with pytest.raises(ValueError, match="no generate_until request"):
        ds.samples_from_lm_eval("m", "fp32", lm_samples, log[:1])


def test_results_folder_roundtrip_and_config_check(tmp_path):
    df = _hand_made()
    for (model, run), g in df.groupby(["model", "run"]):
        ds.write_rows_atomic(ds.run_file(tmp_path, model, ds.parse_run(run)), g.to_dict("records"))
    back = ds.load_samples(tmp_path)
    pd.testing.assert_frame_equal(ds.quartile_table(back), ds.quartile_table(df))
    ds.check_config(tmp_path, {"tasks": ["a"], "limit": 2})
    ds.check_config(tmp_path, {"tasks": ["a"], "limit": 2})  # same: fine
    with pytest.raises(ValueError, match="limit: 2 -> 3"):
        ds.check_config(tmp_path, {"tasks": ["a"], "limit": 3})
    assert json.loads((tmp_path / "config.json").read_text()) == {"limit": 2, "tasks": ["a"]}
    with pytest.raises(FileNotFoundError, match="no finished runs"):
        ds.load_samples(tmp_path / "empty")
    from replayssm_quant.eval.downstream_report import write_report

    md = write_report(tmp_path).read_text()
    assert "| nvfp4+sr | +0.0 | -50.0 | -50.0 | -100.0 | -50.0 |" in md  # task A's hand-made deltas
    assert "`nvfp4+sr`: 33.3% (-33.3 pp)" in md  # pooled longest quartile
    assert (tmp_path / "downstream_delta_pp.png").stat().st_size > 10_000
    # a file whose name does not match its run is refused (stale / renamed results)
    (tmp_path / "runs" / "m" / "fp32.jsonl").rename(tmp_path / "runs" / "m" / "old_name.jsonl")
    with pytest.raises(ValueError, match="stale or renamed"):
        ds.load_samples(tmp_path)


def test_downstream_command_end_to_end_with_resume(tmp_path, capsys, monkeypatch):
    """`replayssm-quant downstream` on a tiny random model: runs, report files, resume, config check."""
    pytest.importorskip("lm_eval")
    from replayssm_quant.cli import main
    from replayssm_quant.eval.lm_eval_plugin import ReplaySSMLM

    seen = []  # (batch_size, max_batch_tokens, rows per batch) of the plugin's generation batches
    orig = ReplaySSMLM._batches

    def spy(self, items, lengths):
        for b in orig(self, items, lengths):
            seen.append((self.batch_size, self.max_batch_tokens, len(b)))
            yield b
    monkeypatch.setattr(ReplaySSMLM, "_batches", spy)
    out = tmp_path / "ds"
    # the packaged prompts are >= 34 tokens: a budget of 80 tokens with 3 new tokens = 1-2 rows per batch
    base = ["downstream", "--model", "tiny-qwen3_5", "--tasks", "replayssm_upper", "--limit", "4",
            "--max-gen-toks", "3", "--batch-size", "4", "--max-batch-tokens", "80", "--device", "cpu",
            "--out", str(out)]
    assert main(base + ["--state", "nvfp4+sr"]) == 0
    assert {s[:2] for s in seen} == {(4, 80)} and max(s[2] for s in seen) <= 2 and sum(s[2] for s in seen) == 8
    assert json.loads((out / "config.json").read_text())["max_batch_tokens"] == 80
    runs = out / "runs" / "tiny-qwen3_5"
    assert sorted(p.name for p in runs.glob("*.jsonl")) == ["fp32.jsonl", "nvfp4+sr.jsonl"]
    first = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.jsonl")}
    samples = ds.load_samples(out)
    assert len(samples) == 8 and set(samples.run) == {"fp32", "nvfp4+sr"}
    assert samples.gen_tokens.between(1, 3).all()  # tokens generated, from the plugin's log
    assert set(samples.correct) <= {0.0, 1.0}
    # resume: the finished runs are skipped, only the new one is evaluated
    assert main(base + ["--state", "nvfp4+sr", "--state", "conventional:fp8+sr"]) == 0
    assert "2 run(s) already in" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in runs.glob("fp32.jsonl")} == {"fp32.jsonl": first["fp32.jsonl"]}
    assert (runs / "conventional-fp8+sr.jsonl").exists()
    table = pd.read_csv(out / "downstream_quartiles.csv")
    assert set(table.run) == {"fp32", "nvfp4+sr", "conventional:fp8+sr"}
    assert set(table.quartile) == {"Q1", "Q2", "Q3", "Q4", "all"}
    assert (table[table.run == "fp32"].delta_pp == 0).all()
    md = (out / "README.md").read_text()
    assert "conventional:fp8+sr" in md and "downstream_delta_pp.png" in md
    assert (out / "downstream_delta_pp.png").stat().st_size > 10_000
    # a different configuration into the same folder is refused, naming what differs
    assert main(base[:-2] + ["--out", str(out), "--limit", "3"]) == 2
    assert "limit: 4 -> 3" in capsys.readouterr().err
    # the token budget is part of the configuration (it decides the batches: stochastic-rounding slots)
    assert main(base + ["--max-batch-tokens", "none"]) == 2
    assert "max_batch_tokens: 80 -> None" in capsys.readouterr().err
    for bad in ("-1", "lots", "1.5"):
        assert main(base + ["--max-batch-tokens", bad]) == 2
        assert "--max-batch-tokens must be an integer >= 0 (0 or none = no budget)" in capsys.readouterr().err
    # bad run names are one-line errors
    assert main(base + ["--state", "conventional:nvfp4/fp8"]) == 2
    assert "shared spec" in capsys.readouterr().err


def test_max_batch_tokens_option_and_config(tmp_path):
    """--max-batch-tokens: default 65536, 0/none = no budget (None); recorded in config.json, where a
    folder from before the option (no key) equals no budget; run_downstream refuses bad values."""
    from replayssm_quant.cli import build_parser
    from replayssm_quant.commands.downstream import _max_batch_tokens

    args = build_parser().parse_args(["downstream"])
    assert _max_batch_tokens(args.max_batch_tokens) == ds.DEFAULT_MAX_BATCH_TOKENS == 65536
    assert [_max_batch_tokens(x) for x in ("0", "none", "NONE", "4096")] == [None, None, None, 4096]
    cfg = ds.run_config(["t"], None, 16, 0, 128, None, None, "exact_match", None, 0)
    assert cfg["max_batch_tokens"] is None
    old = {k: v for k, v in cfg.items() if k != "max_batch_tokens"}
    (tmp_path / "config.json").write_text(json.dumps(old))
    ds.check_config(tmp_path, cfg)  # an old folder resumes with no budget
    with pytest.raises(ValueError, match="max_batch_tokens: None -> 65536"):
        ds.check_config(tmp_path, {**cfg, "max_batch_tokens": 65536})
    with pytest.raises(ValueError, match="max_batch_tokens must be an integer >= 0 or None"):
        ds.run_downstream(tmp_path / "x", ["tiny-qwen3_5"], ds.plan_runs([]), ["t"], max_batch_tokens=-5)
    assert not (tmp_path / "x").exists()


def test_select_filter_for_multi_filter_tasks():
    s = {"gsm8k": [{"doc_id": 0, "filter": "strict-match", "exact_match": 0.0},
                   {"doc_id": 0, "filter": "flexible-extract", "exact_match": 1.0}],
         "replayssm_copy": [{"doc_id": 0, "filter": "none", "exact_match": 1.0}]}
    out, chosen = ds.select_filter(s, None)
    assert chosen == {"gsm8k": "strict-match", "replayssm_copy": "none"}
    assert [x["exact_match"] for x in out["gsm8k"]] == [0.0]
    with pytest.raises(ValueError, match="has no filter 'flexible-extract'; its filters: \\['none'\\]"):
        ds.select_filter(s, "flexible-extract")


def test_task_manager_knows_packaged_and_builtin_tasks():
    pytest.importorskip("lm_eval")
    tm = ds.task_manager()
    names = set(tm.all_tasks)
    assert {"replayssm_copy", "replayssm_upper", ds.SYNTH_TAG, "gsm8k"} <= names
    assert {"replayssm_count", "replayssm_recall", ds.LONG_TAG} <= names


def test_unknown_task_or_include_path_fails_before_anything_loads(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from replayssm_quant.eval import lm_eval_plugin

    monkeypatch.setattr(lm_eval_plugin, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))
    runs = ds.plan_runs(["fp8+sr"])
    with pytest.raises(ValueError, match=r"unknown lm-eval task\(s\) nosuchtask: not a task, group or tag"):
        ds.run_downstream(tmp_path / "o", ["gdn-demo"], runs, ["replayssm_copy", "nosuchtask"], device="cpu")
    with pytest.raises(ValueError, match=r"--include-path /no/such/dir: no such folder"):
        ds.run_downstream(tmp_path / "o", ["gdn-demo"], runs, ["replayssm_copy"], include_path=["/no/such/dir"])
    assert not (tmp_path / "o").exists()                   # no settings left behind to refuse the next run


def test_packaged_task_data_is_the_heldout_set(tmp_path):
    """The shipped jsonl equal a fresh write from synthetic_tasks (held-out seed), and the task's
    process_results scores a target right and a damaged target wrong."""
    import importlib.util

    written = ds.write_synthetic_task_files(tmp_path)
    for p in written:
        assert p.read_bytes() == (ds.TASKS_DIR / p.name).read_bytes(), f"{p.name} is stale: regenerate it"
    spec = importlib.util.spec_from_file_location("synth_data", ds.TASKS_DIR / "synth_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = json.loads((ds.TASKS_DIR / "synth_upper.jsonl").read_text().splitlines()[0])
    assert mod.process_results(doc, [doc["target"]]) == {"exact_match": 1.0}
    assert mod.process_results(doc, [doc["target"][:-1]]) == {"exact_match": 0.0}
    with pytest.raises(FileNotFoundError, match="available: \\['copy', 'count', 'recall', 'upper'\\]"):
        mod.load("reverse")
    doc = json.loads((ds.TASKS_DIR / "synth_count.jsonl").read_text().splitlines()[-1])
    assert doc["prompt"] == f"count {doc['start']} {doc['end']}\n" and doc["target"].endswith(f" {doc['end']}")
    assert mod.process_results(doc, [doc["target"] + " " + str(doc["end"] + 1)]) == {"exact_match": 0.0}  # overran
    assert {p.name for p in written} >= {"synth_count.jsonl", "synth_recall.jsonl"}


def _equal_runs(docs_per_task: int):
    """fp32 and nvfp4+sr with the same correctness on every sample: every change is 0."""
    rows = []
    for task in ("A", "B"):
        lens, ok = [3 * i + 1 for i in range(docs_per_task)], [i % 2 for i in range(docs_per_task)]
        rows += _rows("m", task, "fp32", lens, ok) + _rows("m", task, "nvfp4+sr", lens, ok)
    return pd.DataFrame(rows)


def _pixels_near(img, rgb, tol=6) -> int:
    import numpy as np

    return int((np.abs(img[..., :3].astype(int) - np.array(rgb)).max(axis=-1) <= tol).sum())


def test_delta_plot_shows_zero_changes_and_the_fp32_baseline():
    """All changes 0: every panel still shows each run (a marker on the zero line, a "0" label) and
    fp32's own bars, so a zero is not mistaken for a missing quartile."""
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt
    import numpy as np

    from replayssm_quant.eval.downstream_report import REFERENCE_COLOR, delta_figure

    fig = delta_figure(ds.quartile_table(_equal_runs(8)))
    try:
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert labels == ["fp32 (reference, 0 by definition)", "nvfp4+sr"]
        fig.canvas.draw()
        img = np.asarray(fig.canvas.buffer_rgba())
        H = img.shape[0]
        spec_rgb = [round(255 * c) for c in mcolors.to_rgb(plt.get_cmap("tab10")(0))]
        ref_rgb = [round(255 * c) for c in mcolors.to_rgb(REFERENCE_COLOR)]
        assert len(fig.axes) == 3  # all tasks, A, B
        for ax in fig.axes:
            bb = ax.get_window_extent()
            panel = img[H - int(bb.y1):H - int(bb.y0), int(bb.x0):int(bb.x1)]  # inside the axes only
            assert _pixels_near(panel, spec_rgb) > 40, ax.get_title()  # 5 markers of the spec
            assert _pixels_near(panel, ref_rgb) > 40, ax.get_title()  # 5 markers of fp32
            assert sum(t.get_text() == "0" for t in ax.texts) == 10  # 2 runs x (4 quartiles + all)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("docs, top, empty", [(1, "Q1", "Q2, Q3, Q4"), (2, "Q3", "Q2, Q4"), (8, "Q4", None)])
def test_headline_names_the_longest_quartile_present(tmp_path, docs, top, empty):
    """Fewer than 4 samples per task leave upper quartiles empty: the headline (and the report's
    "Longest quartile, all tasks:" sentence) still gives the longest one present and says so."""
    from replayssm_quant.eval.downstream_report import headline, write_report

    df = _equal_runs(docs)
    sentences = headline(ds.quartile_table(df), "m")
    assert sentences and f"({top}, " in sentences[0] and "`nvfp4+sr`: " in sentences[1]
    assert (f"{empty} empty: fewer than 4 samples per task" in sentences[0]) if empty else "empty" not in sentences[0]
    for (model, run), g in df.groupby(["model", "run"]):
        ds.write_rows_atomic(ds.run_file(tmp_path, model, ds.parse_run(run)), g.to_dict("records"))
    md = write_report(tmp_path).read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("Longest quartile, all tasks:"))
    assert line == "Longest quartile, all tasks: " + " ".join(sentences)
    assert "(+0.0 pp)" in line


def test_report_gives_generation_speed_per_run(tmp_path):
    """The runs' results.json generation counts (the plugin's) become a tokens/s table in the report."""
    from replayssm_quant.eval.downstream_report import generation_table, write_report

    df = _equal_runs(8)
    speeds = {}
    for k, ((model, run), g) in enumerate(df.groupby(["model", "run"])):
        path = ds.run_file(tmp_path, model, ds.parse_run(run))
        ds.write_rows_atomic(path, g.to_dict("records"))
        tokens, secs = 100 + 37 * k, 0.5 + k
        path.with_suffix(".results.json").write_text(json.dumps(
            {"run": run, "generation": {"tokens": tokens, "seconds": secs}, "weights_dtype": "bfloat16"}))
        speeds[run] = tokens / secs
    table = generation_table(tmp_path)
    assert dict(zip(table.run, table["tokens/s"])) == pytest.approx(speeds) and set(table.weights) == {"bfloat16"}
    md = write_report(tmp_path).read_text()
    assert "## Generation speed" in md and all(f"{v:.4g}" in md for v in speeds.values())
