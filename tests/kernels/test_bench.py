"""The bench command: refuses without a GPU; --cpu-smoke exercises the whole pipeline on tiny shapes."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant import cli  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_bench_refuses_without_gpu(tmp_path, capsys):
    rc = cli.main(["bench", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "needs a CUDA GPU" in err[0]
    assert not (tmp_path / "b").exists()


def test_bench_bad_arguments(capsys):
    assert cli.main(["bench", "--cpu-smoke", "--families", "rwkv", "--out", "/nonexistent/x"]) == 2
    assert "unknown family 'rwkv'" in capsys.readouterr().err
    assert cli.main(["bench", "--batches", "1,x"]) == 2
    assert "--batches must be integers" in capsys.readouterr().err
    assert cli.main(["bench", "--sweep-block-v", "24"]) == 2
    assert "powers of two >= 16" in capsys.readouterr().err
    assert cli.main(["bench", "--maxnreg", "7"]) == 2
    assert "--maxnreg/--sweep-maxnreg must be 0" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU interpreter smoke run")
def test_bench_cpu_smoke_writes_report(tmp_path):
    import pandas as pd

    out = tmp_path / "bench"
    rc = cli.main(["bench", "--cpu-smoke", "--out", str(out), "--families", "gdn", "--specs", "fp32,nvfp4/fp16",
                   "--batches", "1", "--window", "2", "--sweep-block-v", "16", "--sweep-maxnreg", "96,0",
                   "--ring-dtype", "bfloat16"])
    assert rc == 0
    df = pd.read_csv(out / "results.csv")
    assert not (out / "results.partial.csv").exists()   # the incremental copy is gone once the report is written
    assert set(zip(df.spec, df["mode"])) == {("fp32", "conventional"), ("fp32", "replay"), ("nvfp4/fp16", "replay")}
    assert (df.time_us > 0).all() and df.finite.all()
    assert (df.min_bytes == [8 * 2 * 32 * 16, 4 * 1.5 * 2 * 32 * 16, (0.5625 + 2 * 2 / 2) * 2 * 32 * 16]).all()
    corr = pd.read_csv(out / "correctness.csv")
    assert corr.ok.all() and len(corr) == 6 and corr.checked.str.startswith("split vs fused").sum() == 2
    assert corr.checked.str.startswith("split flush, 3xTF32").sum() == 1   # (the interpreter ignores the precision)
    mem = pd.read_csv(out / "memory.csv")
    assert len(mem) == 3 and (mem.total_bytes > mem.checkpoint_bytes).all()
    report = (out / "report.md").read_text()
    assert "| fp32 | replay |" in report and "Memory per sequence slot" in report
    assert "the ring's k and v in bfloat16" in report and set(df[df["mode"] == "replay"].ring_dtype) == {"bfloat16"}
    assert (out / "bench.png").stat().st_size > 10_000
    assert "split_flush" in df and not df.split_flush.any()     # auto: tiny CPU grids run the fused kernel
    # gdn x {fp32, nvfp4/fp16} x block_v 16 x register caps {96, none} x (fused, split: the launcher's non-flush
    # loop, the unrolled one with / without prefetch)
    sw = pd.read_csv(out / "sweep.csv")
    assert len(sw) == 16 and (sw.block_v == 16).all() and (sw.time_us > 0).all() and sw.finite.all()
    assert (sw.flush_us > 0).all() and (sw.nonflush_us > 0).all()
    assert sorted(sw.maxnreg) == [0] * 8 + [96] * 8
    assert sorted(sw.split_flush) == [False] * 4 + [True] * 12
    split = sw[sw.split_flush]
    assert not sw[~sw.split_flush].prefetch.any() and sorted(split.prefetch) == [False] * 6 + [True] * 6
    # the launcher's loop on this 2-program grid: fp32 unrolled with the prefetch, nvfp4 staged (any grid)
    launcher = split[split.groupby(["spec", "maxnreg"]).cumcount() == 0]
    assert list(launcher.nonflush_stages) == [0, 0, 3, 3] and list(launcher.prefetch) == [True, True, False, False]
    assert sorted(split.nonflush_stages) == [0] * 10 + [3] * 2
    assert set(sw.groupby(["spec", "maxnreg"]).split_flush.nunique()) == {2}
    assert "## Tile sweep" in report


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU interpreter smoke run")
def test_bench_resume_keeps_finished_measurements(tmp_path, capsys):
    """A run cut short leaves results.partial.csv; --resume keeps its rows (not re-timed) and times only the
    missing configurations; a partial file without per-row copy bandwidth is refused; without --resume a
    stale partial file is discarded."""
    import pandas as pd

    out = tmp_path / "bench"
    args = ["bench", "--cpu-smoke", "--out", str(out), "--families", "mamba2", "--specs", "fp32", "--batches", "1",
            "--window", "2"]
    assert cli.main(args) == 0
    full = pd.read_csv(out / "results.csv")
    assert len(full) == 2 and (full.copy_GBps > 0).all()
    kept = full[full["mode"] == "conventional"].copy()
    kept["time_us"] = 12345.0                              # a value no re-timing would reproduce
    kept.drop(columns=["frac_copy_bw", "speedup_vs_conv_fp32", "speedup_vs_fla"]).to_csv(
        out / "results.partial.csv", index=False)
    assert cli.main(args + ["--resume"]) == 0
    again = pd.read_csv(out / "results.csv").set_index("mode")
    assert again.loc["conventional", "time_us"] == 12345.0 and again.loc["replay", "time_us"] != 12345.0
    assert "resumed: 1 measurements" in (out / "report.md").read_text()
    kept.drop(columns=["copy_GBps"]).to_csv(out / "results.partial.csv", index=False)
    assert cli.main(args + ["--resume"]) == 2
    assert "no copy_GBps column" in capsys.readouterr().err
    assert cli.main(args) == 0                             # no --resume: the stale partial file is discarded
    assert (pd.read_csv(out / "results.csv").time_us != 12345.0).all()


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU interpreter smoke run")
def test_bench_kernel_knobs_and_phases():
    """Launcher knobs reach the launch (the row reports the flush launch's configuration), only the asked phases
    are timed, an unknown knob is refused with the allowed names."""
    from replayssm_quant.kernels.bench import LAUNCH_KNOBS, Timer, bench_inputs, bench_kernel

    dev = torch.device("cpu")
    shape = dict(num_heads=2, head_k=16, head_v=40)
    x = bench_inputs("gdn", 1, shape, 2, dev)
    r = bench_kernel("gdn", "fp32", "replay", 1, shape, 2, Timer(dev, 1), dev, x,
                     dict(split_flush=True, flush_item_v=64, flush_prefetch=True, block_v=16), phases=("flush",))
    assert r["split_flush"] and r["flush_item_v"] == 64 and r["flush_prefetch"] and not r["flush_scratch"]
    assert r["flush_us"] > 0 and r["time_us"] != r["time_us"] and r["nonflush_us"] != r["nonflush_us"]  # NaN
    assert r["finite"]
    with pytest.raises(ValueError, match="unknown launcher knob.*allowed: " + ", ".join(LAUNCH_KNOBS[:2])):
        bench_kernel("gdn", "fp32", "replay", 1, shape, 2, Timer(dev, 1), dev, x, dict(blockv=16))


def test_launch_sweep_variants():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu", "launch_sweep.py")
    spec = importlib.util.spec_from_file_location("launch_sweep", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.parse_variant("default") == {}
    assert mod.parse_variant("flush_item_v=128, flush_prefetch=true,maxnreg=none") == dict(
        flush_item_v=128, flush_prefetch=True, maxnreg=None)
    for bad, msg in (("flush_item=128", "bad knob"), ("flush_item_v", "bad knob"),
                     ("flush_item_v=big", "not an integer")):
        with pytest.raises(SystemExit, match=msg):
            mod.parse_variant(bad)
