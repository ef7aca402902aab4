"""The embedded models (eval/default_models/{gdn,mamba2,gdn-long,mamba2-long}): stock architecture,
offline loading, and the short-continuation loss recorded at training time.

The shipped folders come from the lead's GPU runs of scripts/gpu/train.sh (gdn, mamba2) and
scripts/gpu/train_long.sh (gdn-long, mamba2-long; reports/models/RUN.md). Where a folder is not
shipped yet, the same checks run on a model trained here for a few CPU steps (tiny size), so the
checks themselves are exercised; the tests that need real training say so and are skipped.
"""

import json
import os
from pathlib import Path

import pytest
import torch

from replayssm_quant.eval.models.configs import GDN_ATTENTION_INTERVAL, layer_kinds
from replayssm_quant.eval.models.tokenizer import BOS_ID, EOS_ID, MODEL_VOCAB_SIZE, PAD_ID

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "eval" / "default_models"
ARCHS = ("gdn", "mamba2", "gdn-long", "mamba2-long")
EXPECTED = {"gdn": ("qwen3_5_text", "Qwen3_5ForCausalLM"), "mamba2": ("nemotron_h", "NemotronHForCausalLM"),
            "gdn-long": ("qwen3_5_text", "Qwen3_5ForCausalLM"), "mamba2-long": ("mamba2", "Mamba2ForCausalLM")}


def _shipped(arch):
    return (DEFAULT_DIR / arch / "model.safetensors").exists()


@pytest.fixture(scope="module", params=ARCHS)
def model_dir(request, tmp_path_factory):
    arch = request.param
    if _shipped(arch):
        return arch, DEFAULT_DIR / arch, True
    from replayssm_quant.eval.training.loop import TrainSettings, train

    out = tmp_path_factory.mktemp(f"fallback_{arch}")
    s = TrainSettings(arch=arch, size="tiny", minutes=0, max_steps=3, batch_size=2, seq_len=256, compile=False,
                      device="cpu", eval_contexts=(256,), eval_max_windows=2, eval_tasks=4, eval_task_max_len=40,
                      eval_recall_max_dist=80)
    return arch, train(s, out, progress=False), False


def _load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(folder))


def test_loads_offline_as_the_stock_architecture(model_dir, monkeypatch):
    arch, folder, shipped = model_dir
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    cfg = json.loads((folder / "config.json").read_text())
    assert "auto_map" not in cfg                      # no custom code: stock transformers classes
    model, tok = _load(folder)
    model_type, cls = EXPECTED[arch]
    assert model.config.model_type == model_type and type(model).__name__ == cls
    assert model.config.vocab_size == MODEL_VOCAB_SIZE
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (PAD_ID, BOS_ID, EOS_ID)
    assert tok("Hello é", add_special_tokens=False)["input_ids"] == list("Hello é".encode())
    # exactly the intended configuration (eval/models/configs.py)
    from replayssm_quant.eval.models.configs import build_config

    want = build_config(arch, "default" if shipped else "tiny")
    keys = ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
            "intermediate_size"]
    if arch == "mamba2-long":
        keys = ["hidden_size", "num_hidden_layers", "num_heads", "head_dim", "n_groups", "state_size", "expand",
                "conv_kernel", "vocab_size", "chunk_size"]
    elif arch in ("gdn", "gdn-long"):
        keys += ["layer_types", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim"]
    else:
        keys += ["layers_block_type", "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel"]
    for key in keys:
        assert getattr(model.config, key) == getattr(want, key), key
    kinds = layer_kinds(model.config)
    if arch.endswith("-long"):
        # the long-memory layouts: nothing but SSM mixers, or one attention layer that only sees embeddings
        assert kinds == ["ssm"] * len(kinds) if arch == "mamba2-long" else kinds == ["attention"] + ["ssm"] * (len(kinds) - 1)
        assert len(kinds) >= 2
        return
    mixers = [k for k in kinds if k in ("ssm", "attention")]
    assert mixers.count("ssm") >= 2 * mixers.count("attention") >= 2   # mostly SSM, some attention
    if arch == "gdn":
        assert model.config.layer_types == [
            "full_attention" if (i + 1) % GDN_ATTENTION_INTERVAL == 0 else "linear_attention"
            for i in range(len(kinds))]
        assert type(model.model.layers[0].linear_attn).__name__ == "Qwen3_5GatedDeltaNet"
    else:
        assert set(kinds) == {"ssm", "attention", "mlp"} and "moe" not in kinds
        # attention every few blocks: at most 3 SSM mixers between attention layers
        run = 0
        for k in mixers:
            run = 0 if k == "attention" else run + 1
            assert run <= 3
        assert type(model.model.layers[0].mixer).__name__ == "NemotronHMamba2Mixer"


def test_loads_in_a_fresh_offline_process(model_dir):
    """HF_HUB_OFFLINE=1 set before transformers is imported: AutoTokenizer + AutoModelForCausalLM + generate."""
    import subprocess
    import sys

    arch, folder, _ = model_dir
    code = (
        "import sys, torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1])\n"
        "ids = tok('copy 1:ab\\n', return_tensors='pt').input_ids\n"
        "out = m.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)\n"
        "print(type(m).__name__, out.shape[1] - ids.shape[1])\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", code, str(folder)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    name, n_new = r.stdout.split()[-2:]
    assert name == EXPECTED[arch][1] and 1 <= int(n_new) <= 3


def test_weights_bf16_and_size(model_dir):
    from safetensors import safe_open

    arch, folder, shipped = model_dir
    with safe_open(folder / "model.safetensors", "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"BF16"}
    if shipped:   # every shipped model together (model_report.SIZE_LIMIT_MB)
        total = sum((DEFAULT_DIR / a / "model.safetensors").stat().st_size for a in ARCHS if _shipped(a))
        assert total <= 40e6, f"shipped weights {total / 1e6:.1f} MB > 40 MB"


@pytest.mark.books
def test_reference_continuation_loss_matches_training_record(model_dir):
    from replayssm_quant.eval import gutenberg
    from replayssm_quant.eval.training.evaluate import reference_loss

    arch, folder, _ = model_dir
    rec = json.loads((folder / "eval.json").read_text())["reference"]
    book = next(p for p in gutenberg.heldout_books() if p.name == rec["book"])
    model, _ = _load(folder)
    got = reference_loss(model, book)
    assert got["length"] == rec["length"] and got["offset"] == rec["offset"]
    assert abs(got["loss_nats"] - rec["loss_nats"]) < 0.02, (got, rec)


def test_shipped_model_solves_a_short_copy_task(model_dir):
    arch, folder, shipped = model_dir
    if arch.endswith("-long"):
        pytest.skip("the -long models learn recall, not copying (test_shipped_long_model_recalls)")
    if not shipped:
        pytest.skip(f"eval/default_models/{arch} is not shipped yet (needs the GPU training run)")
    from replayssm_quant.eval.synthetic_tasks import generate_tasks, score
    from replayssm_quant.eval.training.evaluate import greedy_generate

    model, _ = _load(folder)
    tasks = [t for t in generate_tasks(6, seed=99, min_len=40, max_len=80)]
    gens = greedy_generate(model, [t["prompt"].encode() for t in tasks], 90)
    ok = [score(g.decode("utf-8", "replace"), t["target"]) for g, t in zip(gens, tasks)]
    assert sum(ok) >= 4, list(zip(gens, [t["target"] for t in tasks]))


def test_shipped_long_model_recalls_through_its_state(model_dir):
    """Recall of a 4-digit value given 1000-1500 bytes earlier works far above chance (1e-4 per instance) and
    fails once the SSM states are zeroed before the query, so the state, not attention, carries it.

    The test asks for issue 26's target, at least half exact with the state kept, and none with it zeroed: the
    shipped models' measured recall in these distance quartiles is far above half, and 0 after a reset
    (reports/models), so a miss here is a regression, not chance; the first long models fail it. Kept on the
    first 8 instances (mamba2-long 4: its transformers torch path is slow on a CPU), zeroed on the first 2
    (a recall by chance is 1e-4 per instance)."""
    arch, folder, shipped = model_dir
    if not arch.endswith("-long"):
        pytest.skip("recall is the task of the -long models")
    if not shipped:
        pytest.skip(f"eval/default_models/{arch} is not shipped yet (needs the GPU training run)")
    from replayssm_quant.eval.memory import recall_with_reset
    from replayssm_quant.eval.synthetic_tasks import generate_recall_tasks

    model, _ = _load(folder)
    tasks = generate_recall_tasks(16, seed=123, min_dist=1000, max_dist=1500)[:4 if arch == "mamba2-long" else 8]
    kept = recall_with_reset(model, tasks, reset=False)
    zeroed = recall_with_reset(model, tasks[:2], reset=True)
    assert kept["correct"].sum() >= len(tasks) / 2, kept
    assert zeroed["correct"].sum() == 0, zeroed


@pytest.mark.parametrize("name", ["gdn-long", "mamba2-long"])
def test_long_model_names_resolve_to_their_folders(name):
    from replayssm_quant.eval.adapters.loading import DEMO_MODELS, default_models_dir, load_model

    assert DEMO_MODELS[name] == name and default_models_dir() == DEFAULT_DIR
    if not _shipped(name):
        with pytest.raises(ValueError, match=f"embedded model '{name}' is missing"):
            load_model(name)
        return
    lm = load_model(name)
    assert type(lm.model).__name__ == EXPECTED[name][1] and lm.source == str(DEFAULT_DIR / name)
