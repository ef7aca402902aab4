"""`replayssm-quant eval` / `report`: clear one-line errors (exit 2), an interrupted run resumes to the same results."""

from pathlib import Path

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
    (["--model", "no-such-model", "--data", "/no/such/path"], "unknown model 'no-such-model'"),
    (["--tokens", "0"], "--tokens must be >= 1"),
    (["--dtype", "fp64"], "unknown dtype 'fp64'; valid: auto, bfloat16, float16, float32"),
    (["--exec", "fast"], "unknown execution 'fast'; valid: step, chunked, chunked-all"),
])
def test_bad_values_exit_2_with_one_line(argv, match, capsys, tmp_path):
    assert main(["eval", "--out", str(tmp_path / "o"), "--no-progress"] + argv) == 2
    line = _err(capsys)
    assert line.startswith("replayssm-quant eval: error: ") and match in line


@pytest.mark.parametrize("dtype, weights", [("auto", "float32"), ("bfloat16", "bfloat16"), ("float16", "float16"),
                                            ("float32", "float32")])
def test_dtype_is_applied_and_recorded(dtype, weights, text_file, tmp_path):
    """--dtype sets the weights (auto: the checkpoint's; the tiny models are float32), run.json and the report
    say it, with the execution and the peak memory per phase; the report carries the statistics table."""
    import json

    out = tmp_path / "o"
    assert main(["eval", "--model", "tiny-mamba2", "--data", text_file, "--prefill", "4", "--tokens", "5",
                 "--docs", "1", "--window", "4", "--no-progress", "--state", "nvfp4+sr", "--state",
                 "conventional:fp16", "--dtype", dtype, "--out", str(out)]) == 0
    cfg = json.loads((out / "run.json").read_text())
    assert cfg["dtype"] == dtype and cfg["weights_dtype"] == weights and cfg["exec"] == "chunked-all"   # the default
    assert cfg["alloc_conf"]              # the allocator setting in effect (eval/allocator.py)
    assert set(cfg["memory"]) == {"note", "load", "prefill", "decode"}
    assert cfg["memory"]["decode"]["peak_allocated_bytes"] is None and cfg["memory"]["decode"]["peak_rss_bytes"] > 0
    md = (out / "report.md").read_text()
    assert f"weights {weights} (--dtype {dtype})" in md and "Execution: chunked-all" in md and "Peak memory: load" in md
    assert "## Statistics at positions 4-5" in md and "same top-1 %" in md
    import pandas as pd
    stats = pd.read_csv(out / "stats.csv", dtype={"positions": str})
    assert set(stats["variant"]) == {"nvfp4+sr", "conventional:fp16"} and list(stats["positions"][:3]) == ["1", "2-3", "4-5"]


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


def _hide_books(tmp_path, monkeypatch):
    """No Gutenberg folder anywhere: the variable points at an empty folder, no ../shared is reachable."""
    from replayssm_quant.eval import gutenberg

    empty = tmp_path / "no-books"
    empty.mkdir()
    monkeypatch.setenv(gutenberg.ENV_VAR, str(empty))
    monkeypatch.setattr(gutenberg, "_REPO_ROOT", tmp_path / "lone" / "clone")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):
        gutenberg.heldout_books()


def test_default_model_and_data_need_nothing_beside_the_package(tmp_path, monkeypatch, capsys):
    """No --model, no --data, no books: the embedded gdn-long on the packaged sampled documents, and the
    report says in one line what the model is and how far its state remembers (its stored memory.json)."""
    _hide_books(tmp_path, monkeypatch)
    assert main(["eval", "--prefill", "16", "--tokens", "8", "--docs", "1", "--state", "nvfp4+sr",
                 "--no-progress", "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    assert "# KL report: gdn-long" in md and "Data: sampled: text sampled" in md
    about = next(ln for ln in md.splitlines() if ln.startswith("About the model:"))
    assert "6 layers ASSSSS" in about and "half-life" in about and "gdn-long/memory.json" in about
    assert "sampled[0]#0" in (tmp_path / "o" / "results.csv").read_text()
    # the books, when wanted, are asked for by name and give a clear error here
    capsys.readouterr()
    assert main(["eval", "--data", "heldout-books", "--out", str(tmp_path / "o2"), "--no-progress"]) == 2
    assert "no Gutenberg books" in _err(capsys)


@pytest.fixture()
def two_texts(tmp_path):
    d = tmp_path / "texts"
    d.mkdir()
    (d / "a.txt").write_text("".join(chr(97 + i % 26) for i in range(400)))
    (d / "b.txt").write_text("".join(chr(65 + i % 26) for i in range(400)))
    return str(d)


def _small(data, out, *extra):
    return ["eval", "--model", "tiny-mamba2", "--data", data, "--prefill", "8", "--tokens", "6", "--batch-docs", "1",
            "--window", "4", "--no-progress", "--state", "nvfp4+sr", "--out", str(out)] + list(extra)


def test_resume_with_more_docs_keeps_document_identity(two_texts, tmp_path, capsys):
    """--docs 2 then --docs 3 into one folder == a fresh --docs 3 run (no duplicated, no skipped document)."""
    assert main(_small(two_texts, tmp_path / "r", "--docs", "2")) == 0
    capsys.readouterr()
    assert main(_small(two_texts, tmp_path / "r", "--docs", "3")) == 0
    out = capsys.readouterr().out       # (fp32 and nvfp4+sr for 2 documents; the third's 2 records are new)
    assert f"4 records already in {tmp_path / 'r'}: kept (only the missing ones run)" in out
    assert "2 records written in 1 batches" in out
    assert main(_small(two_texts, tmp_path / "fresh", "--docs", "3")) == 0
    got = (tmp_path / "r" / "results.csv").read_text()
    assert got == (tmp_path / "fresh" / "results.csv").read_text()
    import pandas as pd

    ids = pd.read_csv(tmp_path / "r" / "results.csv").drop_duplicates("doc")["doc_id"].tolist()
    assert ids == ["a#0", "b#0", "a#1"]


def test_variants_with_their_own_window_get_a_report(two_texts, tmp_path):
    """``replay@L:SPEC`` variants (README) run and report: their state bytes per step use their own window."""
    out = tmp_path / "w"
    assert main(_small(two_texts, out, "--docs", "1", "--state", "replay@2:nvfp4+sr", "--state",
                       "conventional:fp8")) == 0
    import pandas as pd

    from replayssm_quant.quant.spec import parse_state_spec

    s = pd.read_csv(out / "summary.csv", index_col=0)["state B/elem/step"]
    sp = parse_state_spec("nvfp4+sr")
    assert s["replay@2:nvfp4+sr"] == sp.step_bytes_per_element("replay", 2)
    assert s["nvfp4+sr"] == sp.step_bytes_per_element("replay", 4) != s["replay@2:nvfp4+sr"]
    assert s["conventional:fp8"] == parse_state_spec("fp8").step_bytes_per_element("conventional")
    assert main(["report", str(out)]) == 0


def test_extending_a_folder_keeps_every_command_exec_mode_and_batch_timing(two_texts, tmp_path, monkeypatch):
    """A rerun that adds a variant (batch 0 again) in another --exec: the report names both calls and both
    modes, and the first call's batch timing stays beside the second's."""
    import sys

    out = tmp_path / "x"
    first = _small(two_texts, out, "--docs", "1", "--exec", "step")
    second = _small(two_texts, out, "--docs", "1", "--state", "fp8+sr", "--exec", "chunked")
    for argv in (first, second):
        monkeypatch.setattr(sys, "argv", ["replayssm-quant"] + argv)
        assert main(argv) == 0
    md = (out / "report.md").read_text()
    import shlex

    assert ("Commands (this folder's records were made by each in turn): "
            + "; ".join(f"`replayssm-quant {shlex.join(a)}`" for a in (first, second))) in md
    assert "Execution: step (one token per model forward); then chunked (" in md
    assert sorted(p.name for p in (out / "batches").glob("*.json")) == ["b0000.1.json", "b0000.json"]


def test_conventional_mode_runs_the_default_states_it_can(two_texts, tmp_path, capsys):
    """--mode conventional without --state: the default list less its separate (replay-only) specs, said so."""
    from replayssm_quant.commands.eval_kl import DEFAULT_STATES

    argv = [a for a in _small(two_texts, tmp_path / "c", "--docs", "1", "--mode", "conventional")
            if a not in ("--state", "nvfp4+sr")]
    assert main(argv) == 0
    note = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("--mode conventional:")]
    kept = [s for s in DEFAULT_STATES if "/" not in s]
    assert note == ["--mode conventional: the default states less the separate READ/RECUR specs (replay only): "
                    + " ".join(kept)]
    import pandas as pd

    from replayssm_quant.eval.decode import parse_variant

    got = pd.read_csv(tmp_path / "c" / "results.csv")["variant"].tolist()
    want = ["fp32"] + list(dict.fromkeys(parse_variant(s, "conventional").label for s in kept))
    assert got == want            # (conventional:fp8+sr, in the list twice, runs once)


def test_resume_refuses_other_documents_or_another_model(two_texts, tmp_path, monkeypatch, capsys):
    import replayssm_quant.eval.adapters.tiny as tiny

    assert main(_small(two_texts, tmp_path / "r", "--docs", "2")) == 0
    (tmp_path / "texts" / "a.txt").write_text("".join(chr(48 + i % 10) for i in range(400)))   # data changed
    capsys.readouterr()
    assert main(_small(two_texts, tmp_path / "r", "--docs", "2")) == 2
    assert "document d0000 ('a#0') has other tokens now" in _err(capsys)
    (tmp_path / "texts" / "a.txt").write_text("".join(chr(97 + i % 26) for i in range(400)))   # back
    real = tiny.tiny_model
    monkeypatch.setattr(tiny, "tiny_model", lambda arch, seed=0, **k: real(arch, seed=seed + 1, **k))  # "retrained"
    capsys.readouterr()
    assert main(_small(two_texts, tmp_path / "r", "--docs", "2")) == 2
    assert "other settings (model_hash: " in _err(capsys)


def _no_model_load(monkeypatch):
    import replayssm_quant.eval.adapters.loading as loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))


def test_out_errors_come_before_the_model_loads(two_texts, tmp_path, monkeypatch, capsys):
    import replayssm_quant.eval.results as results

    _no_model_load(monkeypatch)
    (tmp_path / "file").write_text("x")
    assert main(_small(two_texts, tmp_path / "file")) == 2
    assert "is a file, not a folder" in _err(capsys)
    assert main(_small(two_texts, tmp_path / "file" / "sub")) == 2
    assert "cannot create the folder" in _err(capsys)
    (tmp_path / "ro").mkdir()
    real_access = results.os.access
    monkeypatch.setattr(results.os, "access", lambda p, m: False if str(p) == str(tmp_path / "ro") else real_access(p, m))
    assert main(_small(two_texts, tmp_path / "ro")) == 2       # read-only folder (simulated: the tests may run as root)
    assert "is not writable" in _err(capsys)
    (tmp_path / "j.jsonl").write_text('{"body": "x"}\n')
    assert main(_small(str(tmp_path / "j.jsonl"), tmp_path / "o")) == 2
    assert "no key 'text'" in _err(capsys)
    assert not (tmp_path / "o" / "run.json").exists() and not (tmp_path / "o" / ".lock").exists()


def test_device_cuda_without_cuda_is_one_line(tmp_path, monkeypatch, capsys):
    import torch

    _no_model_load(monkeypatch)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    assert main(["eval", "--device", "cuda", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "built without CUDA" in _err(capsys)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert main(["eval", "--device", "cuda:1", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "no CUDA GPU is visible" in _err(capsys)
    assert main(["eval", "--device", "gpu", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--device gpu: not a torch device; use cpu, cuda or cuda:N" in _err(capsys)


def test_hub_id_offline_fails_at_once(monkeypatch):
    import time

    from replayssm_quant.eval.adapters.loading import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="not in the local Hugging Face cache.*HF_HUB_OFFLINE=1"):
        load_model("no-such-org/no-such-model-xyz")
    assert time.perf_counter() - t0 < 20


def test_failed_model_load_leaves_no_settings(two_texts, tmp_path, monkeypatch, capsys):
    """A run failing at model load leaves no run.json (the next run is not refused) and no lock."""
    import replayssm_quant.eval.adapters.loading as loading

    real = loading.load_model

    def broken(*a, **k):
        raise ValueError("cannot load model 'x': broken")
    monkeypatch.setattr(loading, "load_model", broken)
    assert main(_small(two_texts, tmp_path / "o", "--prefill", "9")) == 2
    assert not (tmp_path / "o").exists()          # no run.json, no lock: the empty folder it made is gone too
    monkeypatch.setattr(loading, "load_model", real)
    # failing after the model loaded, before the first result (e.g. the kernels' set-up): no run.json either
    import replayssm_quant.eval.kl as kl

    real_batch = kl.kl_batch

    def fails(*a, **k):
        raise ValueError("backend='triton' on a CPU device needs TRITON_INTERPRET=1")
    monkeypatch.setattr(kl, "kl_batch", fails)
    assert main(_small(two_texts, tmp_path / "o", "--prefill", "9")) == 2
    assert not (tmp_path / "o").exists()
    monkeypatch.setattr(kl, "kl_batch", real_batch)
    assert main(_small(two_texts, tmp_path / "o")) == 0
    assert (tmp_path / "o" / "run.json").is_file()


def test_triton_backend_on_cpu_without_interpreter_fails_first(tmp_path, monkeypatch, capsys):
    _no_model_load(monkeypatch)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["eval", "--device", "cpu", "--backend", "triton", "--out", str(tmp_path / "o")]) == 2
    assert "needs TRITON_INTERPRET=1" in _err(capsys)


def test_folder_lock(two_texts, tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "o"
    out.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".lock").write_text(f"{live.pid}\n")
        assert main(_small(two_texts, out)) == 2
        assert f"in use by another run (pid {live.pid}" in _err(capsys)
    finally:
        live.kill()
        live.wait()
    (out / ".lock").write_text(f"{live.pid}\n")        # its process is gone: a stale lock is taken over
    assert main(_small(two_texts, out)) == 0
    assert not (out / ".lock").exists() and (out / "report.md").is_file()


def test_report_on_read_only_folder(two_texts, tmp_path, monkeypatch, capsys):
    import os

    assert main(_small(two_texts, tmp_path / "r")) == 0
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(tmp_path / "r") else real_access(p, m))
    capsys.readouterr()
    assert main(["report", str(tmp_path / "r")]) == 2
    assert "is not writable; pass --out OTHER_FOLDER" in _err(capsys)
    assert main(["report", str(tmp_path / "r"), "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "report.md").is_file()
    first = (tmp_path / "elsewhere" / "summary.csv").read_text()
    assert main(["report", str(tmp_path / "elsewhere")]) == 0          # rebuilt from its CSVs and run.json
    assert (tmp_path / "elsewhere" / "summary.csv").read_text() == first


def test_interrupt_says_how_to_resume(two_texts, tmp_path, monkeypatch, capsys):
    import shlex

    import replayssm_quant.eval.kl as kl

    def stop(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(kl, "kl_batch", stop)
    argv = _small(two_texts, tmp_path / "o")
    assert main(argv) == 130
    line = _err(capsys)
    assert "rerun the same command to resume: replayssm-quant " + shlex.join(argv) in line
    assert not (tmp_path / "o" / ".lock").exists()


def test_fallback_advice_is_silenced_other_warnings_kept():
    import logging

    from replayssm_quant.eval.adapters.loading import silence_fallback_advice

    silence_fallback_advice()
    log = logging.getLogger("transformers.integrations.hub_kernels")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    h = Keep()
    log.addHandler(h)
    try:
        log.warning("`causal_conv1d_fn` is falling back to its reference PyTorch implementation because "
                    "`causal_conv1d` is not installed.")
        log.warning("something else")
    finally:
        log.removeHandler(h)
    assert seen == ["something else"]


def test_default_output_folder_is_git_ignored():
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("kl_results/report.md", "reports/kl/gdn-demo/records/d0000/fp32.npz"):
        assert subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=root).returncode == 0, path


def test_interrupted_bench_says_to_rerun_with_resume(monkeypatch, capsys):
    """bench resumes only with --resume: an interrupt names the command with it (and without a second copy)."""
    import replayssm_quant.commands.bench as bench

    def stop(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(bench, "run", stop)
    assert main(["bench", "--families", "gdn"]) == 130
    assert _err(capsys) == ("interrupted; finished work is kept: rerun with --resume to resume: "
                            "replayssm-quant bench --families gdn --resume")
    assert main(["bench", "--families", "gdn", "--resume"]) == 130
    assert _err(capsys).endswith("rerun the same command to resume: replayssm-quant bench --families gdn --resume")
    # the same from the device-call script (it printed a traceback)
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_bench", Path(__file__).parents[2] / "scripts/gpu/bench.py")
    gpu_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_bench)
    assert gpu_bench.main(["--families", "gdn"]) == 130
    assert _err(capsys) == ("interrupted; finished work is kept: rerun with --resume to resume: "
                            "python3 scripts/gpu/bench.py --families gdn --resume")
