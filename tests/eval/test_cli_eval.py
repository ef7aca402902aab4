"""`replayssm-quant eval` / `report`: clear one-line errors (exit 2), an interrupted run resumes to the same results."""

import pytest

from replayssm_quant.cli import main


@pytest.fixture()
def text_file(tmp_path):
    p = tmp_path / "text.txt"
    p.write_text("It was a truth universally acknowledged, that a single man in possession of a good fortune, "
                 "must be in want of a wife. " * 8)
    return str(p)


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("argv, match", [
    (["--state", "nvfp5"], "unknown format 'nvfp5'"),
    (["--state", "fp8+rs"], "bad suffix '+rs'"),
    (["--state", "fast:fp8"], "unknown decode mode 'fast'"),
    (["--state", "conventional:nvfp4/fp8"], "takes a shared spec"),
    (["--state", "replay@0:fp8"], "bad window '0'"),
    (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--model", "tiny-gpt2"], "unknown tiny model 'tiny-gpt2'"),
    (["--model", "tiny-mamba2", "--data", "/no/such/path"], "--data '/no/such/path': no such file or folder"),
    (["--model", "no-such-model", "--data", "/no/such/path"], "--data '/no/such/path': no such file or folder"),
    (["--tokens", "0"], "--tokens must be >= 1"),
])
def test_bad_values_exit_2_with_one_line(argv, match, capsys, tmp_path):
    assert main(["eval", "--out", str(tmp_path / "o"), "--no-progress"] + argv) == 2
    line = _err(capsys)
    assert line.startswith("replayssm-quant eval: error: ") and match in line


def test_model_folder_without_config(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    assert main(["eval", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "o")]) == 2
    assert "has no config.json" in _err(capsys)


def test_interrupted_run_resumes_to_same_results(text_file, tmp_path, monkeypatch, capsys):
    import replayssm_quant.eval.kl as kl

    base = ["eval", "--model", "tiny-mamba2", "--data", text_file, "--prefill", "8", "--tokens", "10",
            "--docs", "3", "--batch-docs", "1", "--window", "4", "--no-progress",
            "--state", "nvfp4+sr", "--state", "nvfp4/fp8+sr", "--state", "conventional:fp8+sr"]
    assert main(base + ["--out", str(tmp_path / "full")]) == 0
    calls = {"n": 0}
    real = kl.kl_batch

    def interrupt_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(kl, "kl_batch", interrupt_second)
    assert main(base + ["--out", str(tmp_path / "part")]) == 130
    assert not (tmp_path / "part" / "results.csv").exists()
    monkeypatch.setattr(kl, "kl_batch", real)
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "part")]) == 0
    out = capsys.readouterr().out
    assert "8 records written in 2 batches" in out        # only the two missing documents ran
    full = (tmp_path / "full" / "results.csv").read_text()
    assert full == (tmp_path / "part" / "results.csv").read_text()
    assert len(full.strip().splitlines()) == 1 + 3 * 4
    # `report DIR` regenerates the same results file and the report
    (tmp_path / "full" / "report.md").unlink()
    assert main(["report", str(tmp_path / "full")]) == 0
    assert (tmp_path / "full" / "results.csv").read_text() == full
    md = (tmp_path / "full" / "report.md").read_text()
    assert "nvfp4+sr / nvfp4/fp8+sr" in md and "tokens/s" in md
    # resuming with other settings is refused with one line
    capsys.readouterr()
    assert main(base[:-6] + ["--prefill", "9", "--out", str(tmp_path / "full")]) == 2
    assert "other settings (prefill: 8 there vs 9 now)" in _err(capsys)


def test_report_on_non_results_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a KL results folder" in _err(capsys)


def test_default_model_and_data(tmp_path, capsys):
    """No --model, no --data: the embedded gdn-demo on its held-out books (runs once the model is installed)."""
    from replayssm_quant.eval.adapters.loading import default_models_dir
    from replayssm_quant.eval.gutenberg import heldout_books

    if not (default_models_dir() / "gdn" / "config.json").is_file():
        pytest.skip("embedded gdn-demo model not installed in eval/default_models/gdn")
    heldout_books()  # FileNotFoundError (a failure) if the books are missing
    assert main(["eval", "--prefill", "16", "--tokens", "8", "--docs", "1", "--state", "nvfp4+sr",
                 "--no-progress", "--out", str(tmp_path / "o")]) == 0
    assert "gdn-demo" in (tmp_path / "o" / "report.md").read_text()
