"""Adapters: hooked decoding vs unmodified transformers, and per-layer states vs the kernel-level reference.

Tiny random configs of every supported architecture (built in code, no hub).
"""

import inspect
import os

import pytest
import torch

from replayssm_quant.eval.adapters import ssm_layers
from replayssm_quant.eval.adapters.tiny import TINY_ARCHS, tiny_model
from replayssm_quant.eval.decode import DecodeSession, parse_variant
from replayssm_quant.kernels.naive import oracle_sequence
from replayssm_quant.kernels.state_cache import SSMStateCache

P, STEPS, DOCS = 8, 41, 2


def _cache_kw(model):
    return "cache_params" if "cache_params" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def hf_decode(model, ids, P):
    """Unmodified transformers: prefill ids[:, :P], then one token at a time. Returns (logits [T+1, B, vocab], cache)."""
    kw = _cache_kw(model)
    out = model(ids[:, :P], use_cache=True)
    cache, logits = getattr(out, kw), [out.logits[:, -1]]
    for t in range(P, ids.shape[1]):
        out = model(ids[:, t:t + 1], **{kw: cache}, use_cache=True)
        cache = getattr(out, kw)
        logits.append(out.logits[:, -1])
    return torch.stack(logits), cache


@torch.no_grad()
def session_decode(session, ids, P):
    logits = [session.prefill(ids[:, :P])]
    for t in range(P, ids.shape[1]):
        logits.append(session.step(ids[:, t]))
    return torch.stack(logits)


def _count_steps(session):
    counts = {"n": 0}
    for idx, _, _ in session.layers:
        for c in session.caches(idx):
            orig = c.step

            def counted(*a, _orig=orig, **k):
                counts["n"] += 1
                return _orig(*a, **k)
            c.step = counted
    return counts


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_fp32_matches_transformers(arch):
    """fp32 spec through the hooked decode path == unmodified decoding (1e-4 relative) over 41 steps,
    with window 16 and window 3 (both cross flushes); a low-precision variant batched beside them
    changes its own rows only."""
    model = tiny_model(arch, seed=1)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 256, (DOCS, P + STEPS), generator=g)
    ref, _ = hf_decode(model, ids, P)
    variants = ["fp32", "replay@3:fp32", "nvfp4+sr"]
    with DecodeSession(model, variants, window=16, seed=3, backend="torch") as s:
        got = [s.prefill(ids[:, :P])]
        counts = _count_steps(s)
        assert [c.window for c in s.caches(s.layers[0][0])] == [16, 3, 16]
        for t in range(P, P + STEPS):
            got.append(s.step(ids[:, t]))
        got = torch.stack(got)
        n_layers = len(s.layers)
    scale = ref.abs().max()
    for i, name in enumerate(variants[:2]):
        err = (got[:, s.rows(i)] - ref).abs().max() / scale
        assert err <= 1e-4, f"{arch} {name}: fp32 decode differs from transformers by {err:.3g} (relative)"
    # the decode path really went through the caches: one call per (step, SSM layer, variant)
    assert counts["n"] == STEPS * n_layers * len(variants)
    # and the low-precision rows differ well beyond the fp32 rows' rounding noise (the hook changes the output)
    assert (got[1:, s.rows(2)] - ref[1:]).abs().max() / scale > 10 * max(err, 1e-7)


def test_prefill_logits_and_unhook():
    """Prefill logits equal the model's own; close() restores the model's own decoding."""
    model = tiny_model("qwen3_5", seed=4)
    ids = torch.randint(0, 256, (1, P + 5), generator=torch.Generator().manual_seed(5))
    ref, _ = hf_decode(model, ids, P)
    s = DecodeSession(model, "fp8", window=4, backend="torch")
    got = session_decode(s, ids, P)
    assert torch.allclose(got[0], ref[0], atol=1e-6)
    assert not torch.allclose(got[1:], ref[1:], atol=1e-5)
    # a second session attached to the same model does not disturb the first one
    s2 = DecodeSession(model, "fp32", window=4, backend="torch")
    assert torch.equal(session_decode(s, ids, P), got)
    s2.close()
    s.close()
    again, _ = hf_decode(model, ids, P)
    assert torch.equal(again, ref)


FAMILY_ARCHS = {"gdn": "qwen3_5", "mamba2": "nemotron_h", "kda": "kimi_linear"}


@pytest.mark.parametrize("family", sorted(FAMILY_ARCHS))
def test_low_precision_states_match_kernel_reference(family):
    """Per layer: the adapter's cache state == a standalone SSMStateCache fed the captured per-step inputs;
    and those inputs are the model's own (float64 oracle from the prefill state reproduces the
    transformers fp32 recurrent state after the same tokens)."""
    arch = FAMILY_ARCHS[family]
    model = tiny_model(arch, seed=6)
    T = 11
    ids = torch.randint(0, 256, (DOCS, P + T), generator=torch.Generator().manual_seed(7))
    variants = ["fp32", "nvfp4/fp8+sr", "conventional:fp8+sr", "nvfp4+sr"]
    s = DecodeSession(model, variants, window=4, seed=11, backend="torch")
    s.prefill(ids[:, :P])
    captured = {}
    for idx, _, _ in s.layers:
        for vi, c in enumerate(s.caches(idx)):
            rec = captured.setdefault((idx, vi), [])
            orig = c.step

            def capture(slot_idx, q, k, v, g, beta=None, *a, _orig=orig, _rec=rec, **kw):
                _rec.append([x.clone() if x is not None else None for x in (slot_idx, q, k, v, g, beta)])
                return _orig(slot_idx, q, k, v, g, beta, *a, **kw)
            c.step = capture
    for t in range(P, P + T):
        s.step(ids[:, t])
    # the transformers fp32 decoding of the same tokens (the model's own recurrence)
    _, hf_cache = hf_decode(model, ids, P)
    prefill_model = tiny_model(arch, seed=6)
    with torch.no_grad():
        out = prefill_model(ids[:, :P], use_cache=True)
    pre_cache = getattr(out, _cache_kw(prefill_model))
    checked = 0
    for idx, layer, fam in s.layers:
        hv, K, V = fam.dims(layer)
        S0 = fam.state_to_vk(pre_cache.layers[idx].recurrent_states[0])
        S_hf = fam.state_to_vk(hf_cache.layers[idx].recurrent_states[0]).double()
        for vi, var in enumerate(map(parse_variant, variants)):
            steps = captured[(idx, vi)]
            assert len(steps) == T
            hk = fam.key_heads(layer)        # the session's caches keep one key per key head, as the model
            assert s.caches(idx)[vi].num_key_heads == hk and (family == "kda" or hk < hv)
            ref = SSMStateCache(family=fam.name, spec=var.spec, num_slots=DOCS, num_heads=hv, head_k=K, head_v=V,
                                window=4, mode=var.mode, seed=11, backend="torch", num_key_heads=hk)
            ref.load_state(torch.arange(DOCS), S0)
            for slot_idx, q, k, v, g, beta in steps:
                ref.step(slot_idx, q, k, v, g, beta)
            slots = torch.arange(DOCS)
            mine = s.caches(idx)[vi]
            assert torch.equal(mine.state(slots), ref.state(slots)), f"layer {idx} {var.label}: state differs"
            assert torch.equal(mine.checkpoint(slots), ref.checkpoint(slots))
            # the captured inputs are the model's: float64 oracle from the prefill state == transformers fp32
            # (all layers for the fp32 variant; the first SSM layer for every variant, since deeper layers of
            # a low-precision variant see hidden states already changed upstream)
            stk = [torch.stack([st[j] for st in steps]) for j in range(1, 5)]
            stk[1] = ref.value_head_keys(stk[1])          # [T, B, HK, K] -> per value head for the oracle
            stk.append(torch.stack([st[5] for st in steps]) if steps[0][5] is not None else None)
            _, states = oracle_sequence(fam.name, S0, *stk)
            if vi == 0 or idx == s.layers[0][0]:
                err = (states[-1] - S_hf).abs().max() / S_hf.abs().max()
                assert err < 1e-5, f"layer {idx} {var.label}: oracle from captured inputs vs transformers {err:.3g}"
            if var.is_reference:
                assert (mine.state(slots).double() - S_hf).abs().max() / S_hf.abs().max() < 1e-5
            else:
                # the recurrence checkpoint is a rounded image of the fp32 state at the last flush
                L = 1 if var.mode == "conventional" else 4
                at_flush = states[(T // L) * L - 1]
                rel = (mine.checkpoint(slots).double() - at_flush).abs().max() / at_flush.abs().max()
                # (fp8 without a scale resolves these ~1e-3 states coarsely: only "it rounded" is checked)
                assert rel > 1e-4, f"layer {idx} {var.label}: checkpoint equals the fp32 state ({rel:.3g})"
            checked += 1
    assert checked == len(s.layers) * len(variants)
    s.close()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 (CPU Triton)")
def test_triton_backend_matches_torch_backend():
    """One tiny run through the Triton kernels (interpreter): same logits as the torch backend."""
    model = tiny_model("qwen3_5", seed=8)
    ids = torch.randint(0, 256, (1, P + 5), generator=torch.Generator().manual_seed(9))
    outs = []
    for backend in ("torch", "triton"):
        with DecodeSession(model, ["nvfp4/fp8+sr"], window=3, seed=1, backend=backend) as s:
            outs.append(session_decode(s, ids, P))
    assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_unsupported_model_and_bad_variant():
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ValueError, match="no SSM layer"):
        DecodeSession(llama, "fp32")
    model = tiny_model("mamba2")
    assert [f.name for _, _, f in ssm_layers(model)] == ["mamba2", "mamba2"]
    with pytest.raises(ValueError, match="conventional decoding keeps one state"):
        DecodeSession(model, "conventional:nvfp4/fp8")
    with pytest.raises(ValueError, match="unknown decode mode"):
        DecodeSession(model, "fast:fp8")
    with pytest.raises(ValueError, match="unknown format"):
        DecodeSession(model, "fp7")
