"""eval/attention.py: grouped-query SDPA without repeat_kv, and its switch around a decode session's calls."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from replayssm_quant.eval.adapters.tiny import TINY_ARCHS, tiny_model
from replayssm_quant.eval.attention import GROUPED_SDPA, grouped_attention, grouped_sdpa_attention
from replayssm_quant.eval.decode import DecodeSession


class _Attn(torch.nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _qkv(B, H, Hkv, T, S, D, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, D, generator=g, dtype=torch.float64), torch.randn(B, Hkv, S, D, generator=g,
            dtype=torch.float64), torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("mask_kind", ["bool", "additive", "batch1"])
def test_grouped_equals_repeat_kv(mask_kind):
    """A T-token window over S keys with a causal + padding mask, GQA 4:1: the transformers sdpa result."""
    B, H, Hkv, T, S, D = 3, 8, 2, 5, 13, 16
    q, k, v = _qkv(B, H, Hkv, T, S, D, seed=1)
    causal = torch.arange(T)[:, None] + (S - T) >= torch.arange(S)[None, :]            # [T, S], bottom-right
    pad = torch.ones(B, S, dtype=torch.bool)
    pad[1, :3] = False                                                                  # a left-padded row
    mask = causal[None, None] & pad[:, None, None, :]                                   # [B, 1, T, S]
    if mask_kind == "batch1":
        mask = causal[None, None]
    if mask_kind == "additive":
        mask = torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, torch.finfo(torch.float64).min)
    m = _Attn(H // Hkv)
    want, _ = sdpa_attention_forward(m, q, k, v, mask, scaling=D ** -0.5)
    got, w = grouped_sdpa_attention(m, q, k, v, mask, scaling=D ** -0.5)
    assert w is None and got.shape == (B, T, H, D) and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_no_mask_and_no_gqa_are_sdpa_unchanged():
    q, k, v = _qkv(2, 4, 2, 3, 3, 8, seed=2)
    for groups, kk, vv in ((2, k, v), (1, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))):
        m = _Attn(groups)
        want, _ = sdpa_attention_forward(m, q, kk, vv, None)
        got, _ = grouped_sdpa_attention(m, q, kk, vv, None)
        assert torch.equal(got, want)


def test_switch_is_scoped_and_leaves_other_implementations():
    model = tiny_model(TINY_ARCHS[0])
    cfg = model.config
    assert cfg._attn_implementation == "sdpa"
    with grouped_attention(model):
        assert cfg._attn_implementation == GROUPED_SDPA
    assert cfg._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError):
        with grouped_attention(model):
            raise RuntimeError("boom")
    assert cfg._attn_implementation == "sdpa"
    cfg._attn_implementation_internal = "eager"
    try:
        with grouped_attention(model):
            assert cfg._attn_implementation == "eager"
    finally:
        cfg._attn_implementation_internal = "sdpa"


def test_session_windows_use_grouped_attention(monkeypatch):
    """A chunked window (mask present, GQA tiny Qwen3.5) goes through the grouped function, which then takes the
    grouped branch; the model is back on sdpa afterwards."""
    import replayssm_quant.eval.attention as att

    calls = []
    real = att.F.scaled_dot_product_attention

    def spy(q, *a, **kw):
        calls.append(tuple(q.shape))
        return real(q, *a, **kw)
    monkeypatch.setattr(att.F, "scaled_dot_product_attention", spy)
    model = tiny_model("qwen3_5")
    ids = torch.randint(0, 256, (2, 6 + 8), generator=torch.Generator().manual_seed(0))
    with DecodeSession(model, ["fp32", "nvfp4/fp16"], window=4, backend="torch", exec_mode="chunked") as s:
        s.prefill(ids[:, :6])
        calls.clear()                      # (the prefill: no mask, transformers' own enable_gqa call)
        s.feed(ids[:, 6:14])
    groups = model.config.num_attention_heads // model.config.num_key_value_heads
    kv = model.config.num_key_value_heads
    assert calls and all(shape[1:3] == (kv, groups * 8) for shape in calls)     # G * T query rows per KV head
    assert model.config._attn_implementation == "sdpa"
