"""A decode session keeps one key per key head in its rings (``Family.key_heads``: Qwen3.5's ``num_k_heads``,
Mamba-2's ``n_groups``), taking every group's first of the keys the model repeated per value head: the same logits
and stored states, bit for bit, as caches with a key per value head, in step and chunked execution and in draft
sessions (speculative verify and accept)."""

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


def _run_draft(model, ids, backend, variants):
    """A draft session: verify rounds of 3, 1 and 2 tokens with per-row accepted counts (flushes on commits)."""
    with DecodeSession(model, variants, window=WINDOW, seed=2, backend=backend, draft="ngram:3") as s:
        s.prefill(ids[:, :P])
        pos, logits = P, []
        for T, acc in ((3, [2, 3]), (1, [1, 1]), (2, [2, 1]), (3, [3, 3]), (3, [1, 2])):
            logits.append(s.verify(torch.stack([ids[r, pos:pos + T] for r in range(ids.shape[0])])))
            s.accept(torch.tensor(acc))
            pos += max(acc)   # (rows that accepted fewer see the other's tokens: any tokens verify)
        states = {(idx, i): (c.checkpoint(s._slots[idx]), c.state(s._slots[idx]), c.ring_k.clone(),
                             c.num_key_heads) for idx, _, _ in s.layers for i, c in enumerate(s.caches(idx))}
    return logits, states


@pytest.mark.parametrize("arch,backend,variants", [("qwen3_5", "torch", VARIANTS),
                                                   ("nemotron_h", "triton", ["nvfp4/fp16", "conventional:fp8+sr"])])
def test_shared_key_rings_in_draft_sessions(arch, backend, variants, monkeypatch):
    model = tiny_model(arch, seed=3)
    ids = torch.randint(0, 256, (2, P + 16), generator=torch.Generator().manual_seed(5))
    shared = _run_draft(model, ids, backend, variants)
    with monkeypatch.context() as m:
        m.setattr(Family, "key_heads", lambda self, layer: self.dims(layer)[0])
        own = _run_draft(model, ids, backend, variants)
    assert all(torch.equal(a, b) for a, b in zip(shared[0], own[0]))
    for key, (ck, st, ring_k, hk) in shared[1].items():
        ck_own, st_own, ring_own, hk_own = own[1][key]
        assert hk * 2 == hk_own, key
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
