"""The ``replayssm`` lm-eval model: registry, request plumbing, exactness of the fp32 path, CLI.

Tiny random byte-level models (a GDN hybrid and a Mamba-2 hybrid) are saved into a temporary
folder, so the tests need no network and no embedded model.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("lm_eval")

from replayssm_quant.eval.lm_eval_plugin import ReplaySSMLM  # noqa: E402  (registers "replayssm")

ARCHS = ("qwen3_5", "nemotron_h")


def _save_tiny(arch: str, folder):
    from transformers import AutoModelForCausalLM

    from replayssm_quant.eval.adapters.tiny import tiny_config
    from replayssm_quant.eval.models.tokenizer import (BOS_ID, EOS_ID, MODEL_VOCAB_SIZE, PAD_ID,
                                                       build_byte_tokenizer)

    cfg = tiny_config(arch, MODEL_VOCAB_SIZE)
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = PAD_ID, BOS_ID, EOS_ID
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # a random Mamba-2 mixer's output is ~1e-7 (tiny dt, x, B, C): make the state matter
        for mod in model.modules():
            if type(mod).__name__ == "NemotronHMamba2Mixer":
                mod.dt_bias.fill_(0.5)
                mod.in_proj.weight.mul_(30)
    gc = model.generation_config
    gc.pad_token_id, gc.bos_token_id, gc.eos_token_id = PAD_ID, BOS_ID, EOS_ID
    model.save_pretrained(folder)
    build_byte_tokenizer().save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_models")
    return {a: _save_tiny(a, root / a) for a in ARCHS}


def _hf(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def _req(*args):
    return SimpleNamespace(args=args)


PROMPTS = ["copy 1:ab 2:cd\n", "upper 1:x\n", "a longer prompt, 1:q 2:rr 3:sss\n", "z"]


def test_registered_in_lm_eval_registry_and_entry_point(tiny_dirs):
    from lm_eval.api.registry import get_model

    cls = get_model("replayssm")
    assert cls is ReplaySSMLM
    eps = [e for e in importlib.metadata.entry_points(group="lm_eval.models") if e.name == "replayssm"]
    assert len(eps) == 1 and eps[0].value == "replayssm_quant.eval.lm_eval_plugin:ReplaySSMLM"
    assert eps[0].load() is ReplaySSMLM
    lm = cls.create_from_arg_string(
        f"pretrained={tiny_dirs['qwen3_5']},state=nvfp4/fp8+sr,mode=replay,window=4,seed=3",
        {"batch_size": 2, "device": "cpu"})
    assert (lm.variant.label, lm.window, lm.seed, lm.batch_size) == ("nvfp4/fp8+sr", 4, 3, 2)
    assert lm.get_model_info()["state"] == "nvfp4/fp8+sr"
    own = ReplaySSMLM(pretrained=tiny_dirs["qwen3_5"], state="replay@8:fp8", device="cpu")
    assert own.get_model_info()["window"] == 8       # the window the caches run: the state's own
    lm2 = cls.create_from_arg_string(f"pretrained={tiny_dirs['qwen3_5']},state=fp8+sr,mode=conventional")
    assert lm2.variant.label == "conventional:fp8+sr"
    # a key in model_args and in lm-eval's own options: model_args win (no "multiple values" TypeError)
    lm3 = cls.create_from_arg_string(f"pretrained={tiny_dirs['qwen3_5']},device=cpu,batch_size=3",
                                     {"batch_size": 2, "device": "cuda:0"})
    assert (str(lm3.device), lm3.batch_size) == ("cpu", 3)
    # lm-eval's own models stay registered next to ours (the plugin imports lm-eval's table first)
    assert get_model("dummy").__name__ == "DummyLM"


@pytest.mark.parametrize("factory", ["create_from_arg_string", "create_from_arg_obj"])
def test_factories_model_args_win_over_lm_eval_options(tiny_dirs, factory, monkeypatch, caplog):
    """Both lm-eval 0.4.x factories (a model_args string; the dict the 0.4.13 CLI passes) with
    lm-eval's device / batch_size / max_batch_size beside the same keys: no "multiple values"
    TypeError, model_args win, lm-eval's values fill the rest; lm-eval's CUDA device (its default
    cuda:0) falls back to cpu with one notice when no GPU is visible."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    folder = tiny_dirs["qwen3_5"]
    make = getattr(ReplaySSMLM, factory)

    def build(margs: dict, extra: dict):
        arg = ",".join(f"{k}={v}" for k, v in margs.items()) if factory == "create_from_arg_string" else margs
        caplog.clear()
        lm = make(arg, extra)
        notices = [r for r in caplog.records if "no CUDA GPU visible" in r.getMessage()]
        return str(lm.device), lm.batch_size, lm.max_batch_size, len(notices)

    lm_eval_opts = {"device": "cuda:0", "batch_size": 3, "max_batch_size": None}
    assert build({"pretrained": folder, "device": "cpu", "batch_size": 2}, lm_eval_opts) == ("cpu", 2, 64, 0)
    assert build({"pretrained": folder}, lm_eval_opts) == ("cpu", 3, 64, 1)
    assert build({"pretrained": folder, "batch_size": "auto", "max_batch_size": 5},
                 {"device": "cpu", "batch_size": 1, "max_batch_size": 9}) == ("cpu", 5, 5, 0)
    assert build({"pretrained": folder}, None) == ("cpu", 1, 64, 0)
    # a cuda device the user put in model_args is kept, and without a GPU it is a clear error
    with pytest.raises(ValueError,
                       match=r"device=cuda: this torch .* built without CUDA; .*\(device=cpu, or leave device unset\)"):
        build({"pretrained": folder, "device": "cuda"}, {"device": "cpu"})


def test_simple_evaluate_with_device_beside_model_args(tiny_dirs, monkeypatch):
    """lm-eval's Python entry point with model_args as a string and as a dict, --device and
    batch_size beside the same keys: the model is built (the run itself is stopped right after)."""
    import lm_eval

    built = []
    orig = ReplaySSMLM.__init__

    def spy(self, *a, **kw):
        orig(self, *a, **kw)
        built.append((str(self.device), self.batch_size))
        raise KeyboardInterrupt  # stop before tasks load: only model construction is under test

    monkeypatch.setattr(ReplaySSMLM, "__init__", spy)
    folder = tiny_dirs["qwen3_5"]
    for margs in (f"pretrained={folder},device=cpu,batch_size=2", {"pretrained": folder, "device": "cpu",
                                                                   "batch_size": 2}):
        with pytest.raises(KeyboardInterrupt):
            lm_eval.simple_evaluate(model="replayssm", model_args=margs, tasks=["replayssm_copy"],
                                    device="cuda:0", batch_size=4)
    assert built == [("cpu", 2), ("cpu", 2)]


@pytest.mark.parametrize("bad, match", [
    ({"state": "fp7"}, "valid forms"),
    ({"state": "nvfp4/fp8", "mode": "conventional"}, "shared spec"),
    ({"mode": "fast"}, "unknown decode mode"),
    ({"colour": "red"}, "unknown model_args \\['colour'\\]"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"max_batch_tokens": -1}, "max_batch_tokens must be an integer >= 0 \\(0 or 'none' = no budget\\), got -1"),
    ({"max_batch_tokens": "lots"}, "max_batch_tokens must be an integer >= 0 \\(0 or 'none' = no budget\\)"),
    ({"max_batch_tokens": 2.5}, "max_batch_tokens must be an integer >= 0"),
    ({"colour": "red"}, "known: .*max_batch_tokens"),
    ({"pretrained": "/no/such/folder"}, "unknown model"),
    ({"dtype": "fp64"}, "^replayssm: unknown dtype 'fp64'; valid: auto, bfloat16, float16, float32"),
    ({"seed": True}, "seed must be an integer >= 0, got True"),
    ({"batch_size": "autox"}, r"batch_size must be an integer >= 1, auto or auto:N, got 'autox'"),
    ({"pretrained": "no-such-model"},
     r"^replayssm: pretrained=no-such-model: unknown model .*valid pretrained= values"),
    ({"state": "replay@4:nvfp4+sr", "window": 8}, r"state=replay@4:nvfp4\+sr carries its own window L=4, and window=8"),
    ({"seed": 2 ** 64}, r"seed must be an int in \[0, 2\*\*63\)"),
])
def test_bad_model_args_are_clear_errors(tiny_dirs, bad, match):
    args = {"pretrained": tiny_dirs["qwen3_5"], "device": "cpu", **bad}
    with pytest.raises(ValueError, match=match):
        ReplaySSMLM(**args)


def test_dtype_arg(tiny_dirs, tmp_path):
    """dtype= sets the weights; auto keeps the checkpoint's (float32 here, bfloat16 for a bf16 checkpoint)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_dirs["qwen3_5"]
    for arg, want in (("auto", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16),
                      ("float32", torch.float32)):
        lm = ReplaySSMLM.create_from_arg_string(f"pretrained={folder},device=cpu,dtype={arg}")
        assert {p.dtype for p in lm.model.parameters()} == {want}, arg
    AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).save_pretrained(tmp_path / "bf16")
    AutoTokenizer.from_pretrained(folder).save_pretrained(tmp_path / "bf16")
    lm = ReplaySSMLM(pretrained=str(tmp_path / "bf16"), device="cpu")
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}


def test_max_batch_tokens_arg(tiny_dirs):
    from replayssm_quant.eval import downstream, lm_eval_plugin

    assert lm_eval_plugin.DEFAULT_MAX_BATCH_TOKENS == downstream.DEFAULT_MAX_BATCH_TOKENS == 65536
    folder = tiny_dirs["qwen3_5"]
    assert ReplaySSMLM(pretrained=folder, device="cpu").max_batch_tokens == 65536
    for arg, want in (("4096", 4096), ("none", None), ("None", None), ("0", None)):
        lm = ReplaySSMLM.create_from_arg_string(f"pretrained={folder},device=cpu,max_batch_tokens={arg}")
        assert lm.max_batch_tokens == want, arg
    assert ReplaySSMLM(pretrained=folder, device="cpu", max_batch_tokens=None).max_batch_tokens is None


def test_batches_respect_rows_and_token_budget(tiny_dirs):
    """Consecutive slices, order kept: <= batch_size rows, rows x longest <= budget, an over-budget item alone."""
    lm = ReplaySSMLM(pretrained=tiny_dirs["qwen3_5"], device="cpu", batch_size=3, max_batch_tokens=15)
    items, lengths = list("abcdefg"), [20, 9, 5, 5, 5, 1, 1]
    assert list(lm._batches(items, lengths)) == [["a"], ["b"], ["c", "d", "e"], ["f", "g"]]
    lm.batch_size = 2
    assert list(lm._batches(items, lengths)) == [["a"], ["b"], ["c", "d"], ["e", "f"], ["g"]]
    lm.batch_size, lm.max_batch_tokens = 3, None  # no budget: rows only
    assert list(lm._batches(items, lengths)) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    lm.max_batch_tokens = 10  # unsorted input: a longer item that would break the budget starts a new batch
    assert list(lm._batches(["x", "y", "z"], [1, 10, 3])) == [["x"], ["y"], ["z"]]
    assert list(lm._batches([], [])) == []


@pytest.mark.parametrize("arch", ARCHS)
def test_token_budget_changes_no_result(tiny_dirs, arch, monkeypatch):
    """The same requests with a tiny token budget (1-2 rows per batch) and with none (one batch): the same
    generations, token for token, and the same log-likelihoods and greedy flags, in request order."""
    import replayssm_quant.eval.decode as decode

    shapes = []
    for name in ("generate", "loglikelihood"):
        orig = getattr(decode.DecodeSession, name)

        def spy(self, ids, *a, _orig=orig, _name=name, **kw):
            shapes.append((_name, tuple(ids.shape), a[0] if _name == "generate" else a[0].shape[1]))
            return _orig(self, ids, *a, **kw)
        monkeypatch.setattr(decode.DecodeSession, name, spy)
    n_gen = 6
    gen_reqs = [_req(p, {"until": [], "max_gen_toks": n_gen}) for p in PROMPTS + ["", "copy 1:ab\n"]]
    gen_reqs.append(_req("upper 1:x\n", {"until": ["\n"], "max_gen_toks": n_gen}))  # another stop group
    ll_reqs = [_req(p, c) for p in PROMPTS for c in (" ab", "1:x", "qq q")] + [_req("", "hello")]
    results, batches = {}, {}
    for budget in (0, 20):
        lm = ReplaySSMLM(pretrained=tiny_dirs[arch], state="fp32", batch_size=8, max_batch_tokens=budget,
                         device="cpu")
        shapes.clear()
        gen = lm.generate_until(gen_reqs, disable_tqdm=True)
        ll = lm.loglikelihood(ll_reqs, disable_tqdm=True)
        ids = sorted((r["context"], r["until"], r["token_ids"]) for r in lm.generation_log)
        results[budget], batches[budget] = (gen, ids, ll), list(shapes)
    # no budget: one batch per (stop settings) group and per continuation length
    assert [s[1][0] for s in batches[0] if s[0] == "generate"] == [len(PROMPTS) + 2, 1]
    # budget 20: rows x (longest prompt + max new tokens or continuation) <= 20, or a single row
    rows = [s[1][0] for s in batches[20]]
    assert max(rows) == 2 and rows.count(1) >= 1 and len(rows) > len(batches[0])
    for name, (r, p), extra in batches[20]:
        assert r == 1 or r * (p + extra) <= 20, (name, r, p, extra)
    assert any(s[1][1] + s[2] > 20 for s in batches[20])  # an over-budget request ran alone
    (g0, ids0, ll0), (g1, ids1, ll1) = results[0], results[20]
    assert g1 == g0 and ids1 == ids0
    assert [b for _, b in ll1] == [b for _, b in ll0]
    # fp32 sums of the same rows in other batch shapes: equal up to float32 rounding (BLAS blocking)
    assert [lp for lp, _ in ll1] == pytest.approx([lp for lp, _ in ll0], rel=1e-6, abs=1e-5)
    # the results are in request order: a request run alone gives the same numbers
    lm = ReplaySSMLM(pretrained=tiny_dirs[arch], state="fp32", batch_size=1, device="cpu")
    assert lm.generate_until(gen_reqs[2:3], disable_tqdm=True) == g0[2:3]
    assert lm.loglikelihood(ll_reqs[7:8], disable_tqdm=True)[0][0] == pytest.approx(ll0[7][0], rel=1e-6, abs=1e-5)


def test_sampling_is_rejected(tiny_dirs):
    lm = ReplaySSMLM(pretrained=tiny_dirs["qwen3_5"], device="cpu")
    with pytest.raises(ValueError, match="greedily"):
        lm.generate_until([_req("x", {"do_sample": True, "max_gen_toks": 2})], disable_tqdm=True)
    with pytest.raises(ValueError, match="greedily"):
        lm.generate_until([_req("x", {"temperature": 0.7, "max_gen_toks": 2})], disable_tqdm=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_fp32_generation_equals_transformers_greedy(tiny_dirs, arch):
    """Batched (left-padded, 3 rows per batch) fp32 generation == model.generate per prompt, token for token."""
    lm = ReplaySSMLM(pretrained=tiny_dirs[arch], state="fp32", batch_size=3, device="cpu")
    n = 10
    outs = lm.generate_until([_req(p, {"until": [], "max_gen_toks": n}) for p in PROMPTS], disable_tqdm=True)
    log = {r["context"]: r for r in lm.generation_log}
    hf = _hf(tiny_dirs[arch])
    for p, text in zip(PROMPTS, outs):
        ids = torch.tensor([list(p.encode())])
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n)
        ref = ref[0, ids.shape[1]:].tolist()
        assert log[p]["token_ids"] == ref, (arch, p)
        assert log[p]["gen_tokens"] == len(ref)
        assert text == lm.tokenizer.decode(ref, skip_special_tokens=True)


def test_stop_strings_cut_generation(tiny_dirs):
    """A two-token stop string taken from the fp32 continuation ends generation where it completes;
    the returned text stops before it (lm-eval's convention); a one-token stop string too."""
    folder = tiny_dirs["qwen3_5"]
    hf, tok = _hf(folder), ReplaySSMLM(pretrained=folder, device="cpu").tokenizer
    found = None
    for p in PROMPTS:
        ids = torch.tensor([list(p.encode())])
        g = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24)
        g = g[0, ids.shape[1]:].tolist()
        for i in range(2, len(g) - 1):
            if all(32 <= t < 127 for t in g[i:i + 2]):
                found = (p, g, bytes(g[i:i + 2]).decode())
                break
        if found:
            break
    assert found, "no printable two-byte stretch in the tiny model's output; change PROMPTS"
    p, g, stop = found
    one = next(bytes([t]).decode() for t in g if 32 <= t < 127)
    for until in ([stop], [one]):
        j = next(j for j in range(1, len(g) + 1) if until[0] in tok.decode(g[:j]))
        lm = ReplaySSMLM(pretrained=folder, device="cpu")
        (text,) = lm.generate_until([_req(p, {"until": until, "max_gen_toks": 24})], disable_tqdm=True)
        assert lm.generation_log[0]["token_ids"] == g[:j]
        assert text == tok.decode(g[:j]).split(until[0])[0]


def _full_forward_logprob(hf, ctx, cont):
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        lp = torch.log_softmax(hf(ids).logits[0].double(), -1)
    pos = torch.arange(len(ctx) - 1, len(ctx) + len(cont) - 1)
    tgt = torch.tensor(cont)
    return float(lp[pos, tgt].sum()), bool((lp[pos].argmax(-1) == tgt).all())


@pytest.mark.parametrize("arch", ARCHS)
def test_loglikelihood_runs_through_the_state(tiny_dirs, arch):
    """fp32: teacher-forced decode == full forward. nvfp4: differs (the continuation really steps
    through the quantized state; a full-sequence forward would not)."""
    hf = _hf(tiny_dirs[arch])
    reqs = [_req("copy 1:ab 2:cd\n", "1:ab 2:cd"), _req("upper 1:x", " 1:X"), _req("hi", " there you")]
    fp32 = ReplaySSMLM(pretrained=tiny_dirs[arch], state="fp32", batch_size=2, device="cpu")
    got = fp32.loglikelihood(reqs, disable_tqdm=True)
    for r, (lp, greedy) in zip(reqs, got):
        ctx, cont = fp32._encode_pair(*r.args)
        ref_lp, ref_greedy = _full_forward_logprob(hf, ctx, cont)
        assert lp == pytest.approx(ref_lp, abs=1e-3)
        assert greedy == ref_greedy
    q = ReplaySSMLM(pretrained=tiny_dirs[arch], state="nvfp4", batch_size=2, device="cpu")
    gq = q.loglikelihood(reqs, disable_tqdm=True)
    assert max(abs(a[0] - b[0]) for a, b in zip(got, gq)) > 1e-4
    # rolling: whole text scored after the prefix token, in windows of max_length tokens
    text = "copy 1:ab 2:cd\n1:ab 2:cd\n"
    ids = list(text.encode())
    ref_lp, _ = _full_forward_logprob(hf, [fp32.prefix_token_id], ids)
    (roll,) = fp32.loglikelihood_rolling([_req(text)], disable_tqdm=True)
    assert roll == pytest.approx(ref_lp, abs=1e-3)
    small = ReplaySSMLM(pretrained=tiny_dirs[arch], state="fp32", device="cpu", max_length=8)
    (roll8,) = small.loglikelihood_rolling([_req(text)], disable_tqdm=True)
    assert roll8 != pytest.approx(roll, abs=1e-6)  # shorter windows lose context: a different number


def test_lm_eval_command_line_offline(tiny_dirs, tmp_path):
    """lm-eval's own CLI through the wrapper (``replayssm-lm-eval``, what editable installs use) on a
    packaged synthetic task by name (no --include_path, the .pth hook turned off: the plugin itself
    registers the tasks), --limit 2, offline."""
    from pathlib import Path

    from replayssm_quant import _lm_eval_autoregister as hook

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "lm_eval_out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", hook.DISABLE_ENV: "1",
           "PYTHONPATH": os.pathsep.join([str(repo)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    cmd = [sys.executable, "-m", "replayssm_quant.eval.lm_eval_plugin", "--model", "replayssm",
           "--model_args", f"pretrained={tiny_dirs['qwen3_5']},state=nvfp4/fp8+sr,mode=replay,window=4,seed=0",
           "--tasks", "replayssm_copy", "--limit", "2",
           "--gen_kwargs", "max_gen_toks=6", "--batch_size", "2", "--device", "cpu",
           "--output_path", str(out), "--log_samples"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = [p for p in out.rglob("results_*.json")]
    assert len(res) == 1, list(out.rglob("*"))
    data = json.loads(res[0].read_text())
    assert data["results"]["replayssm_copy"]["exact_match,none"] == 0.0  # a random model copies nothing
    assert data["config"]["model"] == "replayssm"
    assert (data["config"]["model_device"], data["config"]["model_batch_size"]) == ("cpu", 2)
    samples = [json.loads(line) for f in out.rglob("samples_replayssm_copy_*.jsonl") for line in open(f)]
    assert sorted(s["doc_id"] for s in samples) == [0, 1]
    assert all(len(s["resps"][0][0].encode()) <= 6 for s in samples)


def test_triton_backend_on_cpu_is_refused_before_the_model_loads(tiny_dirs, monkeypatch):
    from replayssm_quant.eval import lm_eval_plugin

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(lm_eval_plugin, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(ValueError, match=r"replayssm: backend=triton: the Triton kernels on a CPU device need "
                                         r"TRITON_INTERPRET=1"):
        ReplaySSMLM(pretrained=tiny_dirs["qwen3_5"], device="cpu", backend="triton")


def test_auto_batch_size_forms(tiny_dirs):
    for bs in ("auto", "auto:4", "AUTO"):
        assert ReplaySSMLM(pretrained=tiny_dirs["qwen3_5"], device="cpu", batch_size=bs,
                           max_batch_size=5).batch_size == 5


def test_stop_strings_are_seen_however_long_ago_they_ended(tiny_dirs):
    """The host checks the stop strings every STOP_CHECK_EVERY steps: a string that ended up to that many tokens
    before a check is still found (it was missed, and the row ran on to max_gen_toks)."""
    from replayssm_quant.eval.lm_eval_plugin import STOP_CHECK_EVERY

    lm = ReplaySSMLM(pretrained=tiny_dirs["qwen3_5"], device="cpu")
    _, stop_fn = lm._stop_setup(("3:",))
    for after in range(STOP_CHECK_EVERY + 1):
        toks = lm.tokenizer.encode("a 1:xy 2:zz 3:" + "q" * after, add_special_tokens=False)
        assert stop_fn(0, toks), after


def test_plugin_refusals_at_a_request_are_one_line_on_the_command_line(monkeypatch):
    import lm_eval.__main__ as lm_main

    from replayssm_quant.eval import lm_eval_plugin

    def refuse():
        raise ValueError("replayssm: the plugin decodes greedily; sampling is not supported")
    monkeypatch.setattr(lm_main, "cli_evaluate", refuse)
    with pytest.raises(SystemExit, match=r"^error: replayssm: the plugin decodes greedily"):
        lm_eval_plugin.main(["--model", "replayssm"])
