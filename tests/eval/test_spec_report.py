"""The speculative-decoding report (eval/spec_report.py) and the generate / spec-report commands: files, resume,
the identity check, one-line errors."""

import json

import pandas as pd
import pytest

from replayssm_quant.cli import main
from replayssm_quant.eval.spec_report import RUN_COLUMNS, SpecReportSettings, load_task_docs, run_spec_report

pytestmark = pytest.mark.filterwarnings("ignore")


def test_report_files_resume_and_identity(tmp_path):
    st = SpecReportSettings(models=("tiny-qwen3_5",), tasks=("copy",), drafts=(3,), docs=2, max_len=30,
                            batch_size=2, device="cpu")
    md = run_spec_report(tmp_path, st)
    runs = pd.read_csv(tmp_path / "spec_runs.csv")
    assert list(runs.columns) == list(RUN_COLUMNS)
    assert sorted(set(runs["draft"])) == ["ngram:3", "none"] and len(runs) == 4
    assert runs["identical"].all()                       # speculative tokens == plain greedy tokens
    none = runs[runs["draft"] == "none"]
    assert (none["steps"] == none["gen_tokens"] - 1).all() and (none["drafted"] == 0).all()
    spec = runs[runs["draft"] == "ngram:3"]
    assert (spec["emitted"] == spec["gen_tokens"] - 1).all() and (spec["accepted"] <= spec["drafted"]).all()
    summary = pd.read_csv(tmp_path / "summary.csv")
    row = summary[summary["draft"] == "ngram:3"].iloc[0]
    assert row["tokens_per_step"] == pytest.approx(spec["emitted"].sum() / spec["steps"].sum())
    assert (tmp_path / "tokens_per_step.png").stat().st_size > 1000
    text = md.read_text()
    assert "Machine: CPU" in text and "differing from the non-speculative greedy output: **0** of 4" in text
    tokens = [json.loads(x) for x in (tmp_path / "tokens.jsonl").read_text().splitlines()]
    assert len(tokens) == 4
    # a rerun into the same folder runs nothing (resume); adding a draft runs only that one
    run_spec_report(tmp_path, st)
    assert len(pd.read_csv(tmp_path / "spec_runs.csv")) == 4
    run_spec_report(tmp_path, SpecReportSettings(**{**vars(st), "drafts": (2,)}))
    runs = pd.read_csv(tmp_path / "spec_runs.csv")
    assert len(runs) == 6 and runs["identical"].all()
    assert json.loads((tmp_path / "config.json").read_text())["drafts"] == [3, 2]     # what the folder holds
    # runs of one folder are comparable: other settings are refused, and nothing is written
    with pytest.raises(ValueError, match=r"holds runs made with docs=2, now docs=3: rerun with the same setting"):
        run_spec_report(tmp_path, SpecReportSettings(**{**vars(st), "docs": 3}))
    assert len(pd.read_csv(tmp_path / "spec_runs.csv")) == 6


def test_each_run_is_timed_after_an_untimed_warm_up(tmp_path, monkeypatch):
    """The first batch of every run is generated once before its timed call (the process's first calls compile
    kernels and record graphs: timed, they made the first run look slow and every later one fast)."""
    from replayssm_quant.eval import decode

    calls = []
    real = decode.DecodeSession.generate
    monkeypatch.setattr(decode.DecodeSession, "generate",
                        lambda self, ids, *a, **kw: calls.append(tuple(ids.shape)) or real(self, ids, *a, **kw))
    st = SpecReportSettings(models=("tiny-qwen3_5",), tasks=("copy",), drafts=(3,), docs=3, max_len=30,
                            batch_size=2, device="cpu")
    run_spec_report(tmp_path, st)
    n = len(load_task_docs("copy", 3, 30))
    batches = [2] * (n // 2) + [1] * (n % 2)
    per_run = [2] + batches                                       # the warm-up: the first batch once more
    assert [c[0] for c in calls] == per_run * 2 and calls[0] == calls[1]


def test_task_docs_are_the_shortest():
    docs = load_task_docs("upper", 3, 45)
    assert [d["gen_len"] for d in docs] == sorted(d["gen_len"] for d in docs) and max(d["gen_len"] for d in docs) <= 45
    with pytest.raises(ValueError, match="no copy document has a target of <= 3 tokens"):
        load_task_docs("copy", 3, 3)


@pytest.mark.parametrize("argv, match", [
    (["generate", "--draft", "ngram:0"], r"bad T \(tokens per verify step\) '0'.*T in 2\.\.16"),
    (["generate", "--check"], "--check compares a speculative run with plain decoding: it needs --draft"),
    (["generate", "--draft", "ngram:4", "--model", "tiny-nope"], "unknown tiny model"),
    (["generate", "--draft", "ngram:4", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["spec-report", "--drafts", "17"], r"bad T \(tokens per verify step\) '17'"),
    (["spec-report", "--max-ngram", "0"], r"bad N \(longest n-gram\) '0'"),
    (["spec-report", "--state", "conventional:nvfp4/fp8"], "takes a shared spec"),
    (["generate", "--device", "meta"], r"--device meta: runs on cpu or cuda, not meta"),
    (["spec-report", "--device", "gpu"], r"--device gpu: not a torch device; use cpu, cuda or cuda:N"),
    (["downstream", "--device", "meta", "--out", "/nonexistent/x"], r"--device meta: runs on cpu or cuda"),
    (["train-demo", "--device", "tpu", "--size", "tiny", "--steps", "1"], r"--device tpu: not a torch device"),
])
def test_command_errors_are_one_line(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    import re
    assert re.search(match, err), err


def test_generate_check_on_a_tiny_model(capsys):
    assert main(["generate", "--model", "tiny-mamba2", "--draft", "ngram:3", "--check", "--prompt", "abcabcabcab",
                 "--max-new-tokens", "6", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "identical to plain greedy: yes" in out and "model steps" in out


def test_generate_defaults_to_the_model_that_learned_the_tasks():
    from replayssm_quant.cli import build_parser

    assert build_parser().parse_args(["generate"]).model == "gdn-demo"


def test_cli_module_run_directly_prints_one_line_errors():
    """``python -m replayssm_quant.cli`` (the module as __main__) catches the commands' UsageError too."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "replayssm_quant.cli", "eval", "--tokens", "0"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "replayssm-quant eval: error: --tokens must be >= 1, got 0"], r.stderr
