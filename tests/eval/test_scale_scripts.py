"""scripts/gpu/kl_scale.py shapes, kl_multi_gpu.py on the CPU (tiny shapes), and the report of their JSON files."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from replayssm_quant.eval.adapters import ssm_layers
from replayssm_quant.eval.scale_report import build_scale_report, main as report_main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "gpu"))
import kl_multi_gpu  # noqa: E402
import kl_scale  # noqa: E402


@pytest.mark.parametrize("shape, billions, ssm, attention", [
    ("kimi_linear_48b", (48, 50), 20, 7),       # 27 layers: KDA, MLA at 4, 8, ..., 24, 27 (from 1)
    ("qwen3_next_80b", (79, 82), 36, 12),       # 48 layers: 3 GDN : 1 attention
])
def test_released_shapes_on_meta(shape, billions, ssm, attention):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(kl_scale.shape_config(shape), dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters()) / 1e9
    assert billions[0] <= n <= billions[1], n
    layers = ssm_layers(model)
    assert len(layers) == ssm and len(model.config.layer_types) - ssm == attention
    cut = kl_scale.cut(kl_scale.shape_config(shape), 5)
    assert cut.num_hidden_layers == 5 and len(cut.layer_types) == 5


def test_tiny_runs_make_the_scale_report(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    small = ["--docs", "1", "--prefill", "4", "--tokens", "4", "--window", "4"]
    monkeypatch.setattr(sys, "argv", ["kl_scale.py", "--out", str(out), "--shape", "tiny-kimi_linear", "--parts",
                                      "throughput,agreement,long,generate", "--long-docs", "1", "--long-prefill", "4",
                                      "--long-tokens", "4", "--gen-prompts", "2", "--gen-tokens", "3", *small])
    kl_scale.main()
    monkeypatch.setattr(sys, "argv", ["kl_multi_gpu.py", "--out", str(out), "--shape", "tiny-qwen3_5",
                                      "--one-gpu-cpu-split", *small])
    kl_multi_gpu.main()
    run = json.loads((out / "kl_scale_tiny-kimi_linear.json").read_text())
    split = json.loads((out / "kl_multi_gpu_cpu_split.json").read_text())
    md = (out / "README.md").read_text()
    # speeds and their ratio against the 8x goal, from the run's own numbers
    ratio = run["chunked_over_step"]
    assert all(run[ex]["warmup_seconds"] > 0 for ex in ("step", "chunked", "chunked-all"))   # untimed warm-ups ran
    speed = md.split("## Row-tokens/s")[1].split("\n## ")[0]
    row = next(line for line in speed.splitlines() if line.startswith("| tiny-kimi_linear "))
    assert f"{ratio:.4g}" in row and row.count("| yes ") == (ratio >= 8) + (run["chunked-all_over_step"] >= 8) + 1
    assert row.rstrip(" |").endswith("yes")                                                # timed after a warm-up
    assert "## Peak memory per phase" in md and re.search(r"\| tiny-kimi_linear\s+\| chunked\s+\| decode\s+\|", md)
    assert re.search(r"\| tiny-kimi_linear\s+\| conventional:fp8\+sr\s+\|", md)          # agreement table
    wall = round(run["long"]["wall_seconds"] / 60, 2)
    assert re.search(rf"\|\s+{wall:.4g} \| yes\s+\|", md)                              # long run vs 8 minutes
    gen = run["generate"]                                                                 # the plugin's speed
    assert set(gen) == set(kl_scale.GEN_STATES) and all(0 < g["tokens"] <= 2 * 3 for g in gen.values())
    assert all(f"{g['tokens_per_s']:.4g}" in md for g in gen.values()) and "## Generation tokens/s" in md
    # the split model: offloaded layers' caches where they run, KL equal to one device
    assert split["layer_check"]["ok"] == split["layer_check"]["layers"] == 2
    assert split["layer_check"]["per_layer"]["2"]["parameter_devices"] == ["meta"]
    assert split["kl_compare"]["max_abs_dkl"] == {"step": 0.0, "chunked": 0.0}
    assert "**2 of 2**" in md and re.search(r"\| step\s+\|\s+0 \| yes", md)
    assert report_main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("scale_report: error: ") and "has no kl_scale_*.json" in err[-1]
    with pytest.raises(ValueError, match="has no kl_scale"):
        build_scale_report(tmp_path)


def test_profile_part_on_the_cpu(tmp_path, monkeypatch):
    """Part profile: per path the wall per unit, the regions (the chunked windows' parts among them), host-sync ops,
    the op tables in .md and every op in .csv."""
    import pandas as pd

    out = tmp_path / "prof"
    monkeypatch.setattr(sys, "argv", ["kl_scale.py", "--out", str(out), "--shape", "tiny-qwen3_5", "--parts", "profile",
                                      "--docs", "1", "--prefill", "4", "--window", "4", "--profile-windows", "1",
                                      "--profile-steps", "2"])
    kl_scale.main()
    run = json.loads((out / "kl_scale_tiny-qwen3_5_profile.json").read_text())["profile"]
    assert set(run) == {"chunked-all", "step"}
    chunk, step = run["chunked-all"], run["step"]
    assert chunk["tokens_per_unit"] == 4 and step["tokens_per_unit"] == 1 and chunk["rows"] == 10
    assert chunk["wall_s_per_unit_unprofiled"] > 0 and chunk["units_profiled"] == 1 and step["units_profiled"] == 2
    # the chunked window's own regions, once per SSM layer (tiny-qwen3_5: 2 GDN layers); the step path has none
    regions = chunk["split_per_unit"]
    assert {"forward", "kl_metrics", "ssm_chunk", "window_reads", "fill_ring", "flush"} <= set(regions)
    assert regions["ssm_chunk"]["calls"] == 2 and regions["window_reads"]["calls"] == 2     # all variants at once
    assert regions["flush"]["calls"] == 2 * (1 + 4)    # per layer: the replay group's flush, the conventional one's 4
    assert "window_reads" not in step["split_per_unit"] and step["split_per_unit"]["ssm_step"]["calls"] == 2
    assert chunk["host_sync_ops_per_unit"].get("aten::item", 0) == 0
    md = (out / "profile_tiny-qwen3_5.md").read_text()
    assert "## chunked-all: 10 rows, 4 token(s) per window" in md and "Top 25 ops by self CPU time" in md
    ops = pd.read_csv(out / "profile_tiny-qwen3_5.csv")
    assert set(ops["path"]) == {"chunked-all", "step"} and (ops["calls"] > 0).all()
    assert {"aten::mm", "replayssm::window_reads"} <= set(ops["op"])
    # on the CPU no device rows: no kernel time, no device spans; the report's profile table has both paths
    assert chunk["kernel_ms_per_unit"] == 0 and regions["flush"]["device_span_ms"] is None
    assert regions["ssm_chunk"]["cpu_ms"] > 0
    prof = build_scale_report(out).read_text().split("## Profile per unit")[1].split("\n## ")[0]
    row = next(line for line in prof.splitlines() if re.match(r"\| tiny-qwen3_5_profile\s+\| chunked-all ", line))
    assert re.search(rf"\|\s+{chunk['rows']} \|", row) and f"{chunk['row_tokens_per_s_unprofiled']:.4g}" in row
    assert re.search(r"\| tiny-qwen3_5_profile\s+\| step ", prof)


def test_long_part_in_document_batches_resumes(tmp_path, monkeypatch):
    """Part long: batches written when done, a progress file, a rerun refused without --resume, with it only the
    missing batch run (same records as the first run: same batch seeds)."""
    import shutil

    out = tmp_path / "out"
    argv = ["kl_scale.py", "--out", str(out), "--shape", "tiny-qwen3_5", "--parts", "long", "--long-docs", "2",
            "--long-doc-groups", "2", "--long-prefill", "4", "--long-tokens", "8", "--window", "4", "--dtype", "float32"]
    monkeypatch.setattr(sys, "argv", argv)
    kl_scale.main()
    first = json.loads((out / "kl_scale_tiny-qwen3_5_long.json").read_text())["long"]
    assert first["batches_done"] == first["batches_this_call"] == 2 and first["wall_seconds"] > 0
    assert len(first["mean_kl"]) == 10 and set(first["docs_per_variant"].values()) == {2}
    prog = json.loads((out / "long_progress_tiny-qwen3_5_long.json").read_text())
    assert prog["closed"] and prog["batches_started"] == 2 and prog["positions"] == 8 and prog["rows"] == 10
    with pytest.raises(SystemExit, match="--resume"):
        kl_scale.main()
    root = out / "long_tiny-qwen3_5_long"
    shutil.rmtree(root / "records" / "d0001")
    (root / "batches" / "b0001.json").unlink()
    monkeypatch.setattr(sys, "argv", argv + ["--resume"])
    kl_scale.main()
    again = json.loads((out / "kl_scale_tiny-qwen3_5_long.json").read_text())["long"]
    assert again["batches_done_before"] == 1 and again["batches_this_call"] == 1 and again["batches_done"] == 2
    assert again["wall_seconds"] is None and again["mean_kl"] == first["mean_kl"]
    md = build_scale_report(out).read_text()
    assert re.search(r"\| 2 of 2\s+\|", md)


def test_sync_check_on_the_cpu(tmp_path):
    """scripts/gpu/sync_check.py: one chunked-all window and one step; on the CPU only the CPU-only exp32 (numpy)
    makes host tensors (the Triton backend under the interpreter; the torch backend's reference flush has its own)."""
    import os

    import sync_check

    res = sync_check.main(["--out", str(tmp_path), "--shape", "tiny-qwen3_5", "--docs", "1", "--prefill", "4",
                           "--window", "4", "--dtype", "float32"])
    assert set(res["paths"]) == {"chunked-all", "step"}
    assert json.loads((tmp_path / "sync_check.json").read_text())["paths"]["step"]["tokens_per_unit"] == 1
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert res["backend"] == "triton"
        for path in res["paths"].values():
            assert all("exp32" in k for k in path["sync_ops"]), path["sync_ops"]
