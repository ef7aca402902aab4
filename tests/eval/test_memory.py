"""eval/memory.py on tiny models whose decays are set by hand: the measured per-token and 16-step
decays are the set ones, and the state-reset ablation sees memory exactly where the decay keeps it."""

import math

import pytest
import torch
import torch.nn.functional as F

from replayssm_quant.eval import memory
from replayssm_quant.eval.models.configs import build_model, ssm_mixers

ARCHS = ("gdn-long", "mamba2-long", "gdn", "mamba2")


def _fix_decay(model, A, dt, seed=0):
    """Every SSM head of every layer: A_log = log A, dt_bias = softplus^-1(dt) (per head, lists cycled),
    the input-dependent part of dt zeroed, other mixer matrices random (so the state matters).
    Returns the expected per-token decay per (layer, head)."""
    gen = torch.Generator().manual_seed(seed)
    want = {}
    with torch.no_grad():
        for idx, m in ssm_mixers(model):
            for name, p in m.named_parameters():
                if p.ndim >= 2 and "conv" not in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            n = m.A_log.numel()
            a = torch.tensor([A[h % len(A)] for h in range(n)], dtype=torch.float64)
            d = torch.tensor([dt[h % len(dt)] for h in range(n)], dtype=torch.float64)
            m.A_log.copy_(a.log())
            m.dt_bias.copy_(d + torch.log(-torch.expm1(-d)))
            if hasattr(m, "in_proj_a"):                       # GDN: g = -A softplus(in_proj_a(x) + dt_bias)
                m.in_proj_a.weight.zero_()
            else:                                             # Mamba-2: dt is the last num_heads rows of in_proj
                m.in_proj.weight[-n:].zero_()
            sp = F.softplus(m.dt_bias.double())               # the parameter as stored (fp32)
            want[idx] = torch.exp(-m.A_log.double().exp() * sp)
    return want


@pytest.mark.parametrize("arch", ARCHS)
def test_decay_table_measures_the_set_decay(arch):
    model = build_model(arch, "tiny", seed=1).eval()
    want = _fix_decay(model, A=[0.02, 3.0, 0.5, 8.0], dt=[1e-3, 0.5, 0.02, 1.0])
    x = torch.randint(0, 256, (3, 80), generator=torch.Generator().manual_seed(2))
    tab = memory.decay_table(model, x, batch_size=2)
    assert sorted(set(tab["layer"])) == sorted(want)
    assert len(tab) == sum(len(v) for v in want.values())
    for _, r in tab.iterrows():
        d = float(want[int(r["layer"])][int(r["head"])])
        for q in ("p10", "p50", "p90"):
            assert r[f"decay_{q}"] == pytest.approx(d, rel=1e-5, abs=1e-12)
            assert r[f"decay16_{q}"] == pytest.approx(d ** 16, rel=1e-4, abs=1e-12)
        assert r["half_life"] == pytest.approx(math.log(0.5) / math.log(d), rel=1e-4)
    frac = memory.heads_remembering(tab)
    assert frac == pytest.approx(float((tab["decay16_p50"] >= 0.9).mean()))
    assert 0 < frac < 1                                   # the set decays straddle 0.9 over 16 steps


def test_record_log_decay_sees_input_dependent_decay_and_restores():
    from transformers.models.mamba2 import modeling_mamba2 as mm

    model = build_model("mamba2-long", "tiny", seed=4).eval()
    orig = mm.mamba2_chunk_scan
    x = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with memory.record_log_decay(model) as rec, torch.no_grad():
        model(input_ids=x, use_cache=False)
    assert mm.mamba2_chunk_scan is orig
    assert sorted(rec) == [i for i, _ in ssm_mixers(model)]
    g = rec[0][0]
    assert g.shape == (2, 40, model.config.num_heads) and (g <= 0).all()
    assert g.std(dim=1).max() > 0                        # per token: depends on the input


@pytest.mark.parametrize("arch", ["gdn-long", "mamba2-long", "mamba2"])
def test_state_reset_ablation_follows_the_decay(arch):
    x = torch.randint(0, 256, (2, 200), generator=torch.Generator().manual_seed(5))
    bins = (0, 16, 64, 128)
    res = {}
    for name, A, dt in (("remembers", [1e-4], [0.5]), ("forgets", [60.0], [1.0])):
        model = build_model(arch, "tiny", seed=2).eval()
        _fix_decay(model, A, dt, seed=3)
        with torch.no_grad():   # peaked predictions: a changed hidden state shows in the NLL
            model.get_output_embeddings().weight.mul_(30.0)
        # the split run with the state kept is the plain forward
        with torch.no_grad():
            full = model(input_ids=x).logits
        kept = memory.continue_with_reset(model, x[:, :60], x[:, 60:], reset=False)
        torch.testing.assert_close(kept, full[:, 60:], atol=3e-4, rtol=1e-3)
        res[name] = memory.state_reset_ablation(model, x, t=60, bins=bins)
    rem, forg = res["remembers"], res["forgets"]
    assert list(rem["distance_from"]) == [0, 16, 64] and list(rem["distance_to"]) == [16, 64, 128]
    # per-step decay exp(-60): nothing of the state survives one byte, so zeroing it changes nothing
    assert forg["delta_bpb"].abs().max() < 1e-5
    # decay ~0.99995 per byte: the zeroed state is still missing 64-128 bytes later
    assert rem["delta_bpb"].abs().iloc[-1] > 1e-3
    assert (rem["bpb_reset"] - rem["bpb_kept"] - rem["delta_bpb"]).abs().max() < 1e-9


def test_state_reset_ablation_rejects_short_windows():
    model = build_model("mamba2-long", "tiny").eval()
    with pytest.raises(ValueError, match="too short"):
        memory.state_reset_ablation(model, torch.zeros(1, 100, dtype=torch.long), t=60, bins=(0, 64))


def test_recall_with_reset_matches_the_batched_evaluation():
    """Without a reset, the split (prefix -> cache -> query) scoring equals recall_accuracy's batched one."""
    from replayssm_quant.eval.synthetic_tasks import generate_recall_tasks
    from replayssm_quant.eval.training.evaluate import recall_accuracy

    model = build_model("gdn-long", "tiny", seed=6).eval()
    tasks = generate_recall_tasks(6, seed=3, min_dist=20, max_dist=120)
    df = recall_accuracy(model, tasks, batch_size=4, progress=False)
    split = memory.recall_with_reset(model, tasks, reset=False)
    assert list(split["distance"]) == [t["distance"] for t in tasks]
    assert list(split["correct"]) == list(df["correct"])
    assert list(split["prediction"]) == list(df["prediction_head"])   # the argmax bytes, position by position
    assert all(len(p) for p in split["prediction"])


def test_memory_command_writes_the_files_the_report_reads(tmp_path):
    """`train-demo --memory FOLDER` on a tiny recall-family folder -> memory.json + decay.csv, and
    `train-demo --report` renders its memory section and plot from them."""
    import json

    import numpy as np

    from replayssm_quant.cli import main
    from replayssm_quant.eval import gutenberg
    from replayssm_quant.eval.training.loop import save_model_folder

    books = tmp_path / "books"
    books.mkdir()
    rng = np.random.default_rng(0)
    for name in gutenberg.HELDOUT_BOOKS:
        (books / name).write_bytes(bytes(rng.integers(97, 123, 3000, dtype=np.uint8)))
    folder = tmp_path / "models" / "mamba2-long"
    save_model_folder(build_model("mamba2-long", "tiny"), folder)
    (folder / "train_meta.json").write_text(json.dumps({"settings": {"arch": "mamba2-long"}}))
    assert main(["train-demo", "--memory", str(folder), "--data-dir", str(books), "--device", "cpu", "--no-progress",
                 "--memory-windows", "2", "--memory-reset-at", "32", "--memory-decay-window", "64",
                 "--memory-recall", "4"]) == 0
    m = json.loads((folder / "memory.json").read_text())
    assert m["reset_at"] == 32 and [r["distance_from"] for r in m["reset"]] == list(memory.RESET_BINS[:-1])
    assert {r["state"] for r in m["recall_reset"]} == {"kept", "reset before query"} and len(m["recall_reset"]) == 8
    import pandas as pd

    d = pd.read_csv(folder / "decay.csv")
    assert len(d) == m["heads"] == 2 * 4 and m["heads_median_decay16_ge_0.9"] == memory.heads_remembering(d)
    assert main(["train-demo", "--memory", str(tmp_path / "nope")]) == 2          # not a model folder
    assert main(["train-demo", "--report", "--models-dir", str(tmp_path / "models"), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "README.md").read_text()
    assert "## Memory of the SSM states" in text and "reset before query" in text
    assert (tmp_path / "r" / "memory_decay.png").stat().st_size > 1000


def test_model_card_summarises_the_stored_memory(tmp_path):
    """The KL report's one line: architecture from the config, memory from memory.json + decay.csv of the
    folder (medians over heads of known decays), 'not measured' without them."""
    import json

    model = build_model("gdn-long", "tiny", seed=1).eval()
    want = _fix_decay(model, A=[0.02, 3.0], dt=[1e-3, 0.5])
    x = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(2))
    tab = memory.decay_table(model, x, batch_size=2)
    line = memory.model_card(model, str(tmp_path))
    assert "Qwen3_5ForCausalLM" in line and "3 layers ASS (S = SSM, A = attention)" in line
    assert "state memory: not measured" in line
    tab.to_csv(tmp_path / "decay.csv", index=False)
    (tmp_path / "memory.json").write_text(json.dumps({"span": 16, "dtype": "float32", "reset_at": 64, "reset": [
        {"distance_from": 0, "distance_to": 16, "delta_bpb": 0.5},
        {"distance_from": 256, "distance_to": 512, "delta_bpb": 0.0123}]}))
    decays = sorted(float(v) for per_layer in want.values() for v in per_layer)
    med = float(torch.tensor(decays, dtype=torch.float64).median()) if len(decays) % 2 else \
        (decays[len(decays) // 2 - 1] + decays[len(decays) // 2]) / 2
    line = memory.model_card(model, str(tmp_path))
    assert f"median per-token decay {med:.4f}" in line
    assert f"{memory.heads_remembering(tab):.0%} of {len(tab)} SSM heads" in line
    assert "changes bits/byte by +0.0123 at t+256..512" in line and f"{tmp_path.name}/memory.json" in line
    assert memory.memory_summary(tmp_path / "nowhere") is None
