"""A model spread over devices (accelerate's device_map, issue 31), as far as a CPU allows.

``disk`` blocks of a CPU map are what ``cpu`` blocks of a GPU map are: offloaded (parameters on the meta device
between forwards) and run on the main device through accelerate's hooks. The session must place each SSM layer's
caches where the layer computes (not on its parameters' meta device) and give the same KL as the model on one
device.
"""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from replayssm_quant.cli import main
from replayssm_quant.eval.adapters import ssm_layers
from replayssm_quant.eval.adapters.loading import load_model, parse_device_map
from replayssm_quant.eval.decode import DecodeSession, parse_variant
from replayssm_quant.eval.kl import KLSettings, kl_batch, with_reference
from replayssm_quant.eval.placement import block_placement, execution_device, input_device

# tiny-qwen3_5: layers 0, 2 GDN, 1 attention; the embeddings, GDN layer 0 and the lm_head offloaded
SPLIT = {"model.embed_tokens": "disk", "model.layers.0": "disk", "model.layers.1": "cpu", "model.layers.2": "cpu",
         "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "disk"}


def test_offloaded_split_matches_one_device():
    one = load_model("tiny-qwen3_5").model
    split = load_model("tiny-qwen3_5", device_map=json.dumps(SPLIT)).model
    assert split.model.layers[0].linear_attn.A_log.device.type == "meta"       # offloaded: no data on the module
    assert input_device(split) == torch.device("cpu")
    layers = {idx: layer for idx, layer, _ in ssm_layers(split)}
    with DecodeSession(split, ["fp32", "nvfp4/fp8+sr"], window=4, backend="torch") as s:
        s.prefill(torch.randint(0, 264, (2, 6), generator=torch.Generator().manual_seed(0)))
        place = s.placement()
    assert set(place) == {0, 2}
    for idx, p in place.items():       # every cache tensor where the layer computes, none on its parameters' meta
        assert p["cache_devices"] == [str(execution_device(split, layers[idx]))] == ["cpu"]
    variants = with_reference([parse_variant(v) for v in ("nvfp4/fp8+sr", "conventional:fp8+sr")])
    tokens = torch.randint(0, 264, (2, 8 + 8 + 1), generator=torch.Generator().manual_seed(1))
    st = KLSettings(prefill=8, tokens=8, window=4, seed=3, backend="torch")     # chunked + a step session
    ref, _ = kl_batch(one, tokens, variants, st, seed=5)
    got, _ = kl_batch(split, tokens, variants, st, seed=5)
    assert ref["kl"][1:].max() > 0
    for m in ref:
        np.testing.assert_allclose(got[m], ref[m], rtol=0, atol=1e-6, err_msg=m)


class _Hooked(torch.nn.Module):
    def __init__(self, hook=None, child=None):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        if child is not None:
            self.child = child
        if hook is not None:
            self._hf_hook = hook


def test_execution_device_follows_hooks():
    """Mock hooks naming GPUs (none here): the nearest hook of the module or an enclosing one decides; a
    SequentialHook's first hook with an execution device; without hooks the parameters' device (meta: cpu)."""
    leaf = _Hooked()
    own = _Hooked(hook=SimpleNamespace(hooks=[SimpleNamespace(), SimpleNamespace(execution_device="cuda:3")]))
    mid = _Hooked(hook=SimpleNamespace(execution_device=1), child=leaf)
    root = _Hooked(child=torch.nn.ModuleDict({"a": mid, "b": own}))
    assert execution_device(root, leaf) == torch.device("cuda:1")
    assert execution_device(root, mid) == torch.device("cuda:1")
    assert execution_device(root, own) == torch.device("cuda:3")
    assert execution_device(root, root) == torch.device("cpu")
    bare = _Hooked().to("meta")
    assert execution_device(bare, bare) == torch.device("cpu")


@pytest.mark.parametrize("text, match", [
    ("fast", "unknown --device-map 'fast'"),
    ("[1, 2]", "is not a name or a non-empty JSON object"),
    ('{"model.layers": "gpu"}', "bad device 'gpu' for module 'model.layers'"),
    ('{"lm_head": -1}', "bad device -1 for module 'lm_head'"),
])
def test_bad_device_map_is_one_line(text, match, tmp_path, capsys):
    with pytest.raises(ValueError, match=match):
        parse_device_map(text)
    assert main(["eval", "--model", "tiny-qwen3_5", "--device-map", text, "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0] and "valid --device-map values" in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
@pytest.mark.parametrize("text", ['{"lm_head": 0}', '{"model.layers.0": "cuda:0"}', '{"lm_head": "cuda"}'])
def test_device_map_naming_an_absent_gpu_is_refused(text):
    """Not a silent run on the CPU: a map that puts a module on a GPU the machine lacks is an error."""
    with pytest.raises(ValueError, match=r"--device-map puts module '.*' on GPU 0, but 0 CUDA GPU\(s\) are visible"):
        parse_device_map(text)


def test_cli_runs_split_and_records_placement(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 4)
    out = tmp_path / "o"
    assert main(["eval", "--model", "tiny-qwen3_5", "--data", str(text), "--prefill", "4", "--tokens", "4",
                 "--docs", "1", "--window", "4", "--state", "nvfp4+sr", "--no-progress", "--no-report",
                 "--device-map", json.dumps(SPLIT), "--out", str(out)]) == 0
    cfg = json.loads((out / "run.json").read_text())
    assert cfg["placement"] == SPLIT and cfg["device_map"] == json.dumps(SPLIT)    # where it ran, what was asked
    assert block_placement(load_model("tiny-qwen3_5").model) == {"": "cpu"}


def test_lm_eval_plugin_on_a_split_model():
    """The plugin (downstream's decoder) on the offloaded split: the same log-likelihoods and generations as on one
    device."""
    from replayssm_quant.eval.lm_eval_plugin import ReplaySSMLM

    outs = []
    for dm in (None, json.dumps(SPLIT)):
        loaded = load_model("tiny-qwen3_5", device_map=dm)
        lm = ReplaySSMLM(model=loaded.model, tokenizer=loaded.tokenizer, state="nvfp4/fp8+sr", window=4,
                         device="cpu", batch_size=2)
        ll = lm.loglikelihood([SimpleNamespace(args=("Once upon a time", " there")),
                               SimpleNamespace(args=("It was", " the best"))], disable_tqdm=True)
        gen = lm.generate_until([SimpleNamespace(args=("Call me", {"until": ["\u0000"], "max_gen_toks": 6}))],
                                disable_tqdm=True)
        outs.append((ll, gen))
    (ll1, gen1), (ll2, gen2) = outs
    assert gen1 == gen2 and len(gen1[0]) > 0
    assert [b for _, b in ll1] == [b for _, b in ll2]
    np.testing.assert_allclose([a for a, _ in ll2], [a for a, _ in ll1], rtol=0, atol=1e-5)
