"""A decode session keeps one key per key head in its rings (``Family.key_heads``: Qwen3.5's ``num_k_heads``,
Mamba-2's ``n_groups``), taking every group's first of the keys the model repeated per value head: the same logits
and stored states, bit for bit, as caches with a key per value head, in step and chunked execution."""

import pytest
import torch

from replayssm_quant.eval.adapters.families import Family
from replayssm_quant.eval.adapters.tiny import tiny_model
from replayssm_quant.eval.decode import DecodeSession

P, N, WINDOW = 6, 9, 4
VARIANTS = ["fp32", "nvfp4/fp16", "nvfp4+sr", "conventional:fp8+sr"]


def _run(model, ids, exec_mode, backend):
    variants = VARIANTS if exec_mode != "chunked" else VARIANTS[:3]
    with DecodeSession(model, variants, window=WINDOW, seed=2, backend=backend, exec_mode=exec_mode) as s:
        s.prefill(ids[:, :P])
        logits = torch.cat([s.feed(ids[:, P + c:P + min(c + WINDOW, N)]) for c in range(0, N, WINDOW)], 1)
        heads = {idx: s.caches(idx)[0].num_key_heads for idx, _, _ in s.layers}
        states = {(idx, i): (c.checkpoint(s._slots[idx]), c.state(s._slots[idx]), c.ring_k.clone())
                  for idx, _, _ in s.layers for i, c in enumerate(s.caches(idx))}
    return logits, heads, states


@pytest.mark.parametrize("arch,exec_mode,backend", [("qwen3_5", "chunked", "torch"), ("nemotron_h", "step", "torch"),
                                                    ("mamba2", "chunked", "torch"), ("qwen3_5", "step", "triton")])
def test_shared_key_rings_equal_per_value_head_keys(arch, exec_mode, backend, monkeypatch):
    model = tiny_model(arch, seed=3)
    ids = torch.randint(0, 256, (2, P + N), generator=torch.Generator().manual_seed(4))
    shared = _run(model, ids, exec_mode, backend)
    with monkeypatch.context() as m:     # caches with a key per value head (HK = HV)
        m.setattr(Family, "key_heads", lambda self, layer: self.dims(layer)[0])
        own = _run(model, ids, exec_mode, backend)
    assert torch.equal(shared[0], own[0])
    assert all(hk * 2 == own[1][idx] for idx, hk in shared[1].items())   # the tiny models: 2 value heads per key head
    for key, (ck, st, ring_k) in shared[2].items():
        ck_own, st_own, ring_own = own[2][key]
        assert torch.equal(ck, ck_own) and torch.equal(st, st_own), key
        assert torch.equal(ring_k, ring_own[:, ::2]), key


def test_keys_that_are_not_repeats_are_refused(monkeypatch):
    """A model whose hooked keys are not one key head repeated per group (here: a wrong key-head count) fails on
    its first step with what is wrong, instead of silently keeping the wrong keys."""
    model = tiny_model("qwen3_5", seed=3)          # 4 value heads, 2 key heads
    monkeypatch.setattr(Family, "key_heads", lambda self, layer: 1)
    ids = torch.randint(0, 256, (1, P + 1), generator=torch.Generator().manual_seed(4))
    with DecodeSession(model, ["fp32"], backend="torch") as s:
        s.prefill(ids[:, :P])
        with pytest.raises(RuntimeError, match=r"not one key head repeated for each of its 4 value heads \(HK = 1 "
                                               r"for HV = 4\)"):
            s.step(ids[:, P])
