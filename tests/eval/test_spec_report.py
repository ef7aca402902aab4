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
    run_spec_report(tmp_path, SpecReportSettings(**{**vars(st), "drafts": (3, 2)}))
    runs = pd.read_csv(tmp_path / "spec_runs.csv")
    assert len(runs) == 6 and runs["identical"].all()


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
