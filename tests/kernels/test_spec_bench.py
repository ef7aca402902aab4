"""scripts/gpu/spec_bench.py: the CPU smoke run writes its tables; bad arguments are one-line errors."""

import os
import subprocess
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels.spec_bench import accepted_counts, conventional_spec  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu", "spec_bench.py")


def test_accepted_counts_average_the_rate():
    for T, p in ((8, 0.5), (4, 0.75), (2, 1.0), (8, 0.0)):
        a = accepted_counts(T, p, 64, "cpu")
        assert a.dtype == torch.int32 and int(a.min()) >= 1 and int(a.max()) <= T
        assert abs(float(a.double().mean()) - (1 + p * (T - 1))) < 1 / 64 + 1e-9
    assert conventional_spec("nvfp4/fp16") == "fp16" and conventional_spec("fp32") == "fp32"


def _run(args, tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke run")
@pytest.mark.parametrize("keys", ["shared", "per-head"])
def test_cpu_smoke_writes_the_report(tmp_path, keys):
    """The smoke shape's gdn has 2 value heads for 1 key head: with shared keys (the default) every cache keeps one
    key, and the device check runs the verify with it against the oracle fed the repeated key."""
    out = tmp_path / "sb"
    r = _run(["--cpu-smoke", "--families", "gdn", "--keys", keys, "--out", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    import pandas as pd

    s = pd.read_csv(out / "summary.csv")
    assert len(s) == 1 and (s.verify_us > 0).all() and (s.conv_verify_us > 0).all() and (s.verify_only_us > 0).all()
    assert {"speedup_50", "speedup_100", "verify_over_replay_step", "verify_over_conv_step"} <= set(s.columns)
    corr = pd.read_csv(out / "correctness.csv")
    assert float(corr.verify_rel_err.max()) < 1e-5 and int(corr.flushes.min()) >= 1
    report = (out / "report.md").read_text()
    assert "Verify cost" in report and not (out / "results.partial.csv").exists()
    assert ("- keys: one per key head of the shape" if keys == "shared" else "- keys: one per value head") in report


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("spec_bench_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--cpu-smoke", "--drafts", "9", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["spec_bench: error: draft length T=9: allowed 1..4 "
                                                            "(the window)"]
    assert mod.main(["--cpu-smoke", "--families", "rwkv", "--out", str(tmp_path / "x")]) == 2
    assert "unknown family 'rwkv'" in capsys.readouterr().err
    assert mod.main(["--cpu-smoke", "--verify-config", str(tmp_path / "none.csv"), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("spec_bench: error:")
    assert mod.main(["--cpu-smoke", "--sweep-verify", "--sweep-dots", "tf32", "--out", str(tmp_path / "x")]) == 2
    assert "verify_dot='tf32'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_budget_spent_before_the_first_measurement_still_writes_the_report(tmp_path):
    """``--budget-s 0``: nothing is timed, and the report says what was left (rerun with --resume)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("spec_bench_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--cpu-smoke", "--families", "gdn", "--specs", "fp32", "--batches", "1", "--drafts", "2",
                     "--budget-s", "0", "--out", str(tmp_path / "b")]) == 0
    report = (tmp_path / "b" / "report.md").read_text()
    assert "measurements not run" in report and "--resume" in report


def test_a_failing_measurement_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    from replayssm_quant.kernels import spec_bench

    def fake_rounds(fam, spec, mode, b, T, p, *a, commit=True, **k):
        if mode == "conventional":
            raise RuntimeError("boom")
        return 10.0 * T * (1.5 if commit else 1.0)

    monkeypatch.setattr(spec_bench, "time_rounds", fake_rounds)
    monkeypatch.setattr(spec_bench, "bench_kernel", lambda *a, **k: dict(time_us=5.0))
    monkeypatch.setattr(spec_bench, "correctness", lambda f, *a, **k: dict(family=f, verify_rel_err=0.0))
    s = spec_bench.run_spec_bench(str(tmp_path / "o"), families=["gdn"], cpu_smoke=True, drafts=[2, 4])
    assert len(s) == 2 and s.conv_verify_us.isna().all() and (s.verify_only_us == 10.0 * s["T"]).all()
    report = (tmp_path / "o" / "report.md").read_text()
    assert ("2 failures (NaN rows): gdn fp32 conv_verify B=2 T=2 p=1.0: RuntimeError: boom; "
            "gdn fp32 conv_verify B=2 T=4") in report


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke run")
def test_cpu_smoke_verify_sweep(tmp_path):
    """--sweep-verify times each (V-block, warps, dot) config and checks it against the float64 oracle."""
    out = tmp_path / "sw"
    r = _run(["--cpu-smoke", "--sweep-verify", "--families", "mamba2", "--sweep-block-v", "16",
              "--sweep-warps", "4,8", "--sweep-dots", "ieee,tf32x3", "--out", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    import pandas as pd

    s = pd.read_csv(out / "verify_sweep.csv")
    assert len(s) == 4 and set(s["dot"]) == {"ieee", "tf32x3"} and set(s["warps"]) == {4, 8}
    assert (s["time_us"] > 0).all() and (s["verify_rel_err"] < 1e-5).all() and s["over_best"].min() == 1.0
