"""Grouped-query SDPA for the model calls of a decode session: no ``repeat_kv`` copies of the KV cache.

transformers' ``sdpa`` attention can hand grouped-query attention (GQA) to SDPA itself
(``enable_gqa``) only without an attention mask. A chunked teacher-forced window (``T`` new tokens over the
whole KV cache) and any padded batch carry a mask, so it first copies every key and value head
``num_key_value_groups`` times (``repeat_kv``): a transient of ``G`` times the layer's KV cache per attention
layer and ``G`` times the KV bytes read per window, the part of a window's time and memory that grows with the
context (the readings: reports/kl/scale/README.md, ``attention_check.md``).

:func:`grouped_sdpa_attention` computes the same attention without the copy: the ``G`` query heads that
share a KV head become ``G * T`` query rows of that KV head (``[B, H, T, D] -> [B, Hkv, G*T, D]``, heads
``kv * G + g`` as ``repeat_kv`` pairs them), the mask is repeated over the group (``[B, 1, G*T, S]``, bools,
not KV), and one SDPA call reads each KV head once. Without a mask, with one query token and no mask, or
without GQA it is transformers' ``sdpa`` path unchanged.

:func:`grouped_attention` switches a model whose attention implementation is ``sdpa`` to it for the
duration of a call and back afterwards (other implementations are left alone), so a user's model is not
changed outside the session's own forwards.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

#: the attention implementation name registered with transformers' AttentionInterface / AttentionMaskInterface
GROUPED_SDPA = "replayssm_grouped_sdpa"


def grouped_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                           is_causal=None, **kwargs):
    """transformers' ``sdpa`` attention function without ``repeat_kv`` (module doc).

    Args:
        module: the attention module (``num_key_value_groups``: query heads per KV head).
        query: ``[B, H, T, D]``; key, value: ``[B, Hkv, S, D]`` (``H = Hkv * G``).
        attention_mask: ``None`` or a bool / additive mask ``[B or 1, 1, T, S]``.

    Returns:
        ``(attn_output [B, T, H, D], None)`` as transformers' attention functions return it.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    G = getattr(module, "num_key_value_groups", 1)
    B, H, T, D = query.shape
    if (G == 1 or attention_mask is None or kwargs.get("position_bias") is not None
            or kwargs.get("output_attentions", False) or attention_mask.dim() != 4 or attention_mask.shape[1] != 1):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    Hkv, S = key.shape[1], key.shape[2]
    q = query.reshape(B, Hkv, G * T, D)                         # head kv * G + g, token t -> row g * T + t
    mb = attention_mask.shape[0]
    mask = attention_mask.expand(mb, 1, T, S)[:, :, None].expand(mb, 1, G, T, S).reshape(mb, 1, G * T, S)
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.reshape(B, H, T, D).transpose(1, 2).contiguous(), None


def register() -> None:
    """Register :data:`GROUPED_SDPA` with transformers (idempotent): the attention function above and sdpa's mask."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    if GROUPED_SDPA not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
    if GROUPED_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)


def _configs(model) -> list:
    """The distinct config objects of ``model`` and its submodules (a composite model's text config included)."""
    seen: dict[int, object] = {}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            seen.setdefault(id(cfg), cfg)
    return list(seen.values())


@contextlib.contextmanager
def grouped_attention(model):
    """Within the block, every config of ``model`` whose attention implementation is ``sdpa`` uses
    :data:`GROUPED_SDPA`; restored on exit (also on an exception)."""
    switched = [c for c in _configs(model) if c._attn_implementation == "sdpa"]
    if switched:
        register()
    for c in switched:
        c._attn_implementation_internal = GROUPED_SDPA   # this config only (the setter would recurse into sub-configs)
    try:
        yield
    finally:
        for c in switched:
            c._attn_implementation_internal = "sdpa"
