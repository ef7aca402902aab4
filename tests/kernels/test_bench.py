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
    assert cli.main(["bench", "--rep-ms", "0"]) == 2
    assert "--rep-ms must be positive" in capsys.readouterr().err
    assert cli.main(["bench", "--out", __file__]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert cli.main(["bench", "--mamba-ssm-src", "/nonexistent"]) == 2
    assert "no mamba_ssm/ folder there" in capsys.readouterr().err
    assert cli.main(["bench", "--cpu-smoke", "--specs", "conventional:fp8+sr", "--out", "/nonexistent/x"]) == 2
    assert "without a mode prefix, got 'conventional:fp8+sr'" in capsys.readouterr().err
    assert cli.main(["bench", "--cpu-smoke", "--families", "mamba2", "--sweep-block-v", "16",
                     "--out", "/nonexistent/x"]) == 2
    assert "--sweep-block-v times gdn, which --families leaves out" in capsys.readouterr().err


def test_cpu_smoke_defaults_are_small():
    """A CPU smoke run without options times 2 specs x 2 batches at window 4 (it ran 5 batches x 6 specs at window
    16, 11+ minutes in the interpreter); a GPU run keeps the full table."""
    from replayssm_quant.kernels.bench import BATCHES, SPECS, configs, run_defaults

    specs, batches, window = run_defaults(True)
    assert len(configs(specs)) * len(batches) * window <= 3 * 2 * 4 and window == 4
    assert run_defaults(False) == (SPECS, BATCHES, 16)
    assert run_defaults(True, ["fp16"], [8], 2) == (["fp16"], [8], 2)


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU interpreter smoke run")
def test_bench_cpu_smoke_writes_report(tmp_path, capfd):
    import pandas as pd

    out = tmp_path / "bench"
    rc = cli.main(["bench", "--cpu-smoke", "--out", str(out), "--families", "gdn", "--specs", "fp32,nvfp4/fp16",
                   "--batches", "1", "--window", "2", "--sweep-block-v", "16", "--sweep-maxnreg", "96,0",
                   "--ring-dtype", "bfloat16"])
    assert rc == 0
    df = pd.read_csv(out / "results.csv")
    assert not (out / "results.partial.csv").exists()   # the incremental copy is gone once the report is written
    assert set(zip(df.spec, df["mode"])) == {("fp32", "conventional"), ("fp32", "replay"), ("nvfp4/fp16", "replay")}
    assert (df.time_us > 0).all() and df.finite.all() and df.rounds_ok.all()
    assert (df.staggered_us > 0).all()                  # (batch 1: the one slot's phase is the only one)
    conv = df[df["mode"] == "conventional"]
    assert (conv.staggered_us == conv.time_us).all() and df.staggered_speedup_vs_conv_fp32.notna().all()
    assert (df.min_bytes == [8 * 2 * 32 * 16, 4 * 1.5 * 2 * 32 * 16, (0.5625 + 2 * 2 / 2) * 2 * 32 * 16]).all()
    corr = pd.read_csv(out / "correctness.csv")
    assert corr.ok.all() and len(corr) == 8 and corr.checked.str.startswith("split vs fused").sum() == 2
    assert corr.checked.str.contains("rows staggered").sum() == 2
    assert corr.checked.str.startswith("split flush, 3xTF32").sum() == 1   # (the interpreter ignores the precision)
    mem = pd.read_csv(out / "memory.csv")
    assert len(mem) == 3 and (mem.total_bytes > mem.checkpoint_bytes).all()
    report = (out / "report.md").read_text()
    assert "| fp32 | replay |" in report and "Memory per sequence slot" in report
    # the report says what a CPU smoke run is, not what a GPU run measures; progress bars even without a terminal
    assert "(CPU smoke run)" in report and "Triton interpreter" in report and "## Targets" not in report
    assert "CUDA-graph replays" not in report and "L2" not in report.replace("no L2 rotation", "")
    err = capfd.readouterr().err
    assert "correctness" in err and "bench" in err
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
    assert "staggered flushes, gdn replay:" in report
    assert "B=1: replay fp32 / conventional fp32" not in report     # no targets for interpreter times


@pytest.mark.parametrize("family", ["gdn", "mamba2"])
def test_stagger_slots_spreads_ring_positions(family):
    """Row i of a group ends at ring position i mod L, its slot in the state of i mod L steps of its own inputs
    (against a cache stepped one row at a time); slots outside the groups are untouched."""
    from replayssm_quant.kernels.bench import bench_inputs, stagger_slots
    from replayssm_quant.kernels.state_cache import SSMStateCache

    L, shape = 3, dict(num_heads=2, head_k=8, head_v=4)
    groups = [torch.tensor([4, 1, 6, 0, 3], dtype=torch.int32), torch.tensor([2, 5], dtype=torch.int32)]
    x = bench_inputs(family, 5, shape, L, torch.device("cpu"))
    init = torch.randn(8, 2, 4, 8, generator=torch.Generator().manual_seed(3))
    caches = [SSMStateCache(family, "fp16", 8, 2, 8, 4, window=L, backend="torch") for _ in range(2)]
    for c in caches:
        c.load_state(torch.arange(8), init)
    stagger_slots(caches[0], groups, x, L)
    for idx in groups:
        for i, slot in enumerate(idx.tolist()):
            for t in range(i % L):
                caches[1].step(torch.tensor([slot]), *(x[n][t][i:i + 1] for n in ("q", "k", "v", "g")),
                               None if x["beta"] is None else x["beta"][t][i:i + 1])
    counts = caches[0].ring_count[:8].tolist()
    assert counts == caches[1].ring_count[:8].tolist() and counts[7] == 0
    assert [counts[s] for s in (4, 1, 6, 0, 3)] == [0, 1, 2, 0, 1] and [counts[2], counts[5]] == [0, 1]
    assert torch.equal(caches[0].state(torch.arange(8)), caches[1].state(torch.arange(8)))
    assert torch.equal(caches[0].state(torch.tensor([7])), init[7:8].half().float())   # (as loaded)


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU interpreter smoke run")
def test_bench_resume_keeps_finished_measurements(tmp_path, capsys, monkeypatch):
    """A run cut short leaves results.partial.csv; --resume keeps its rows (not re-timed) and times only the
    missing configurations; a partial file without per-row copy bandwidth is refused; without --resume a
    stale partial file is discarded. The device checks (tested in tests/kernels/test_bench_checks.py) are one row
    per family here: the test is of which rows a resumed run keeps, and its seven runs would otherwise spend most
    of their time in the checks."""
    import pandas as pd

    import replayssm_quant.kernels.bench as bench_mod

    monkeypatch.setattr(bench_mod, "correctness", lambda family, *a, **k: [dict(
        family=family, spec="fp32", mode="replay", steps=1, checked="(test stub)", max_rel_out_err=0.0,
        max_rel_ckpt_err=0.0, counters_ok=True, ok=True)])
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
    # a resumed row of a family outside --families: kept, and the report (tables, plot) covers both families
    kept.drop(columns=["frac_copy_bw", "speedup_vs_conv_fp32", "speedup_vs_fla"]).to_csv(
        out / "results.partial.csv", index=False)
    other = [a if a != "mamba2" else "gdn" for a in args]
    assert cli.main(other + ["--resume"]) == 0
    both = pd.read_csv(out / "results.csv")
    assert set(both.family) == {"mamba2", "gdn"} and (out / "bench.png").exists()
    kept.drop(columns=["copy_GBps"]).to_csv(out / "results.partial.csv", index=False)
    assert cli.main(args + ["--resume"]) == 2
    assert "no copy_GBps column" in capsys.readouterr().err
    # a finished folder (no partial file): --resume of another family keeps its rows and its device checks, as the
    # device calls that time the table in two parts do
    (out / "results.partial.csv").unlink()
    assert cli.main(args) == 0
    assert cli.main(other + ["--resume"]) == 0
    joined = pd.read_csv(out / "results.csv")
    assert sorted(joined.family.value_counts().to_dict().items()) == [("gdn", 2), ("mamba2", 2)]
    assert set(pd.read_csv(out / "correctness.csv").family) == {"gdn", "mamba2"}
    assert set(pd.read_csv(out / "memory.csv").family) == {"gdn", "mamba2"}
    assert "resumed: 2 measurements from an earlier run into this folder (results.csv" in (out / "report.md").read_text()
    # a resume with other settings is refused before anything in the folder is rewritten (its rows would be kept
    # under this run's header)
    checks = (out / "correctness.csv").read_bytes()
    for extra, said in ((["--window", "3"], "window: 2 there, 3 now"),
                        (["--ring-dtype", "bfloat16"], "ring_dtype: 'float32' there, 'bfloat16' now"),
                        (["--keys", "per-head"], "keys: 'shared' there, 'per-head' now")):
        assert cli.main(args + ["--resume"] + extra) == 2
        assert said in capsys.readouterr().err
    assert (out / "correctness.csv").read_bytes() == checks
    (out / "settings.json").unlink()                 # a folder from before the settings were recorded: its rows' dtype
    assert cli.main(args + ["--resume", "--ring-dtype", "bfloat16"]) == 2
    assert "ring_dtype: ['float32'] there, 'bfloat16' now" in capsys.readouterr().err
    # a family, spec or batch given twice is timed once
    dup = ["bench", "--cpu-smoke", "--out", str(tmp_path / "dup"), "--families", "mamba2,mamba2", "--specs",
           "fp32,fp32", "--batches", "1,1", "--window", "2"]
    assert cli.main(dup) == 0
    assert len(pd.read_csv(tmp_path / "dup" / "results.csv")) == 2
    # no --resume: the stale partial file is discarded (what the bench's driver calls before it times anything)
    kept.to_csv(out / "results.partial.csv", index=False)
    from replayssm_quant.kernels.bench import _resumed_rows
    assert _resumed_rows(str(out / "results.partial.csv"), False, []) == []
    assert not (out / "results.partial.csv").exists()


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
                     dict(split_flush=True, flush_stages=2, nonflush_stages=0, block_v=16), phases=("flush",))
    assert r["split_flush"] and r["flush_item_v"] == 64 and r["flush_stages"] == 2 and not r["flush_scratch"]
    assert r["nonflush_stages"] == 0
    assert r["flush_us"] > 0 and r["time_us"] != r["time_us"] and r["nonflush_us"] != r["nonflush_us"]  # NaN
    assert r["finite"] and r["staggered_us"] != r["staggered_us"]
    with pytest.raises(ValueError, match="unknown phase.*allowed: step, staggered, nonflush, flush"):
        bench_kernel("gdn", "fp32", "replay", 1, shape, 2, Timer(dev, 1), dev, x, phases=("stagger",))
    with pytest.raises(ValueError, match="unknown launcher knob.*allowed: " + ", ".join(LAUNCH_KNOBS[:2])):
        bench_kernel("gdn", "fp32", "replay", 1, shape, 2, Timer(dev, 1), dev, x, dict(blockv=16))


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU interpreter smoke run")
@pytest.mark.parametrize("spec,mode", [("fp32", "replay"), ("nvfp4/fp16", "replay"), ("fp8+sr", "conventional")])
def test_bench_kernel_counters_after_whole_rounds(spec, mode):
    """After the aligned and the staggered phases (whole rounds of L steps over 3 rows) every slot's counters say
    each step ran (``rounds_ok``); phases that are not whole rounds leave it unset."""
    from replayssm_quant.kernels.bench import Timer, bench_inputs, bench_kernel

    dev = torch.device("cpu")
    shape = dict(num_heads=2, head_k=16, head_v=16)
    x = bench_inputs("gdn", 3, shape, 3, dev)
    r = bench_kernel("gdn", spec, mode, 3, shape, 3, Timer(dev, 1), dev, x, phases=("step", "staggered"))
    assert r["rounds_ok"] is True and r["time_us"] > 0 and r["staggered_us"] > 0
    r = bench_kernel("gdn", spec, mode, 3, shape, 3, Timer(dev, 1), dev, x, phases=("nonflush", "flush"))
    assert r["rounds_ok"] is None


def test_whole_rounds_ok_catches_a_skipped_or_repeated_step():
    """whole_rounds_ok: true when every ring count is back and every flush count moved by the same positive
    number with no arrival left; false when one slot's ring count is off, one slot flushed once more or not at
    all, nothing flushed, or an arrival count is left over."""
    from types import SimpleNamespace

    from replayssm_quant.kernels.bench import counters_snapshot, whole_rounds_ok

    def cache(h, f, arrivals=0):   # (SSMStateCache.arrivals_clear: tests/kernels/test_decode.py)
        return SimpleNamespace(ring_count=torch.tensor(h + [0], dtype=torch.int32),
                               flush_count=torch.tensor(f + [0], dtype=torch.int32),
                               arrivals_clear=lambda: arrivals == 0)

    before = counters_snapshot(cache([0, 1, 2], [1, 1, 1]))
    assert whole_rounds_ok(cache([0, 1, 2], [3, 3, 3]), before)
    assert not whole_rounds_ok(cache([0, 2, 2], [3, 3, 3]), before)     # a slot's ring position moved
    assert not whole_rounds_ok(cache([0, 1, 2], [3, 4, 3]), before)     # a slot flushed once more
    assert not whole_rounds_ok(cache([0, 1, 2], [3, 2, 3]), before)     # a slot missed a flush
    assert not whole_rounds_ok(cache([0, 1, 2], [1, 1, 1]), before)     # nothing ran
    assert not whole_rounds_ok(cache([0, 1, 2], [3, 3, 3], arrivals=5), before)


def _launch_sweep_module():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu", "launch_sweep.py")
    spec = importlib.util.spec_from_file_location("launch_sweep", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_launch_sweep_times_each_key_layout_and_ring_dtype(tmp_path, monkeypatch):
    """launch_sweep's loop hands bench_kernel each configuration as asked, key layout and ring dtype in turn (the
    timing itself stubbed: it needs a GPU), and makes each family's inputs once."""
    mod = _launch_sweep_module()
    calls, made = [], []

    def fake_kernel(fam, spec, mode, batch, shape, window, timer, dev, x, knobs, phases, ring_dtype, shared_keys):
        assert x == ("inputs", fam)
        calls.append((fam, spec, ring_dtype, shared_keys))
        return dict(family=fam, spec=spec, time_us=1.0)

    monkeypatch.setattr(mod.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(mod, "Timer", lambda dev, rep_ms: None)
    monkeypatch.setattr(mod, "bench_inputs", lambda fam, *a: made.append(fam) or ("inputs", fam))
    monkeypatch.setattr(mod, "bench_kernel", fake_kernel)
    monkeypatch.setattr(mod, "write_table", lambda *a: "table")
    mod.main(["--out", str(tmp_path), "--families", "gdn,mamba2", "--specs", "fp32,nvfp4/fp16",
              "--keys", "shared,per-head", "--ring-dtypes", "float32,bfloat16", "--stem", "t"])
    assert made == ["gdn", "mamba2"]
    assert calls[:4] == [("gdn", "fp32", mod.RING_DTYPES[r], k == "shared")
                         for r in ("float32", "bfloat16") for k in ("shared", "per-head")]
    assert len(calls) == 16 and [c[3] for c in calls] == [True, False] * 8
    assert len(mod.pd.read_csv(tmp_path / "t.csv")) == 16


def test_launch_sweep_variants():
    mod = _launch_sweep_module()
    assert mod.parse_variant("default") == {}
    assert mod.parse_variant("flush_stages=2, nonflush_prefetch=true,maxnreg=none") == dict(
        flush_stages=2, nonflush_prefetch=True, maxnreg=None)
    for bad, msg in (("flush_item_v=128", "bad knob"), ("flush_stages", "bad knob"),
                     ("flush_stages=big", "not an integer")):
        with pytest.raises(SystemExit, match=msg):
            mod.parse_variant(bad)
    with pytest.raises(SystemExit, match="--ring-dtypes takes float32, bfloat16, got 'float32,bf16'"):
        mod.main(["--out", "unused", "--ring-dtypes", "float32,bf16"])


def test_targets_report_both_flush_phases():
    """The targets section states every ratio for aligned and staggered flushes, from the measured times."""
    import pandas as pd

    from replayssm_quant.kernels.bench_report import _targets, add_ratios

    rows = [("fp32", "conventional", 256, 300.0, 300.0, 8), ("fp32", "replay", 256, 200.0, 150.0, 4.25),
            ("nvfp4/fp16", "replay", 256, 100.0, 60.0, 0.8125), ("fla fp32", "fla fused_recurrent", 256, 240, 240, 8),
            ("fp32", "conventional", 1, 5.0, 5.0, 8), ("fp32", "replay", 1, 6.0, 6.0, 4.25)]
    df = pd.DataFrame([dict(family="gdn", spec=s, mode=m, batch=b, time_us=t, staggered_us=st,
                            min_bytes=e * b * 1e6, GBps=e * b * 1e6 / (t * 1e-6) / 1e9, copy_GBps=4000.0)
                       for s, m, b, t, st, e in rows])
    add_ratios(df)
    assert df.staggered_speedup_vs_conv_fp32.tolist()[:3] == [1.0, 2.0, 5.0]
    assert df.speedup_vs_fla.tolist()[1] == 1.2 and df.staggered_speedup_vs_fla.tolist()[1] == 1.6
    text = "\n".join(_targets(df))
    assert ("gdn B=256, aligned flushes: replay fp32 speedup over conventional fp32 = 1.50x (target >= 1.7x); "
            "nvfp4/fp16 = 3.00x (target >= 6x); replay fp32 over fla = 1.20x") in text
    assert "gdn B=256, staggered flushes: replay fp32 speedup over conventional fp32 = 2.00x" in text
    assert "replay fp32 over fla = 1.60x" in text and "B=1: replay fp32 / conventional fp32 time = 1.20" in text
    # nvfp4/fp16: 0.8125 B/elem * 256e6 / 100 us = 2080 GB/s (52%), staggered 87%; replay fp32 136% / 181%,
    # conventional fp32 171%: one line
    lines = [x for x in text.split("\n") if "below bandwidth target" in x]
    assert lines == ["- below bandwidth target: gdn nvfp4/fp16 replay B=256, aligned flushes: 52% of copy bandwidth "
                     "(target 75%)"]
    df.loc[1, "copy_GBps"] = 1e5
    add_ratios(df)
    text = "\n".join(_targets(df))
    assert "below bandwidth target: gdn fp32 replay B=256, aligned flushes: 5% of copy bandwidth (target 90%)" in text
    assert "gdn fp32 replay B=256, staggered flushes: 7% of copy bandwidth" in text


def test_report_batch_columns_ascend(tmp_path):
    """The report's per-family tables give the batches in ascending order whatever order the rows were timed in (a
    resumed run appends its batches after the earlier run's); the rows keep their order."""
    import pandas as pd

    from replayssm_quant.kernels.bench_report import write_report

    cols = ["staggered_us", "nonflush_us", "flush_us", "min_bytes", "GBps", "frac_copy_bw", "staggered_frac_copy_bw",
            "speedup_vs_conv_fp32", "staggered_speedup_vs_conv_fp32", "speedup_vs_fla", "staggered_speedup_vs_fla",
            "speedup_vs_mamba_ssm", "rotation", "block_v", "flush_block_v", "num_warps", "maxnreg", "split_flush",
            "prefetch"]
    rows = [dict(family="gdn", spec=s, mode=m, batch=b, time_us=t, **{c: 1.0 for c in cols})
            for b, t in ((64, 40.0), (1, 4.0)) for s, m in (("fp32", "replay"), ("fp32", "conventional"))]
    meta = dict(command="test", date="today", device="cpu (test)", versions={}, window=2, ring_dtype="float32",
                shapes={"gdn": dict(note="test shape", num_heads=2, head_k=16, head_v=16)})
    write_report(str(tmp_path), pd.DataFrame(rows), [], [], meta, [])
    table = (tmp_path / "report.md").read_text().split("### gdn (test shape)")[1].split("\n\n")[1].splitlines()
    assert table[0].replace(" ", "") == "|spec|mode|1|64|"
    assert [line.split("|")[2].strip() for line in table[2:]] == ["replay", "conventional"]
