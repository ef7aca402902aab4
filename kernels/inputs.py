"""Random decode inputs shaped and normalised as the model adapters deliver them (tests, benchmark).

gdn/kda: q, k L2-normalised, q scaled by K**-0.5, beta in (0, 1); mamba2: k = B,
q = C of unit-ish scale, v = dt * x, no beta. Log decays g <= 0 (kda per key).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .naive import DELTA_RULE, PER_KEY_DECAY, check_family


def random_decode_inputs(family: str, T: int, B: int, HV: int, K: int, V: int, *, dtype=torch.float32,
                         device="cpu", generator: torch.Generator | None = None, decay_scale: float = 0.1):
    """``T`` steps of inputs for ``B`` rows (drawn on the generator's device, then moved to ``device``).

    Returns:
        dict with ``q, k [T, B, HV, K]``, ``v [T, B, HV, V]``, ``g [T, B, HV]`` (kda ``[T, B, HV, K]``),
        ``beta [T, B, HV]`` or ``None`` (mamba2), all of ``dtype`` on ``device`` (g and beta float32).
    """
    check_family(family)
    gen_device = generator.device if generator is not None else torch.device(device)
    kw = dict(generator=generator, dtype=torch.float32, device=gen_device)
    q = torch.randn(T, B, HV, K, **kw)
    k = torch.randn(T, B, HV, K, **kw)
    v = torch.randn(T, B, HV, V, **kw)
    if DELTA_RULE[family]:
        q = F.normalize(q, dim=-1) * K ** -0.5
        k = F.normalize(k, dim=-1)
        beta = torch.rand(T, B, HV, **kw) * 0.9 + 0.05
    else:
        q, k = q * K ** -0.5, k * K ** -0.5
        v = v * 0.1   # dt * x with dt ~ 0.1
        beta = None
    gshape = (T, B, HV, K) if PER_KEY_DECAY[family] else (T, B, HV)
    g = -torch.rand(*gshape, **kw) * decay_scale
    out = dict(q=q.to(dtype), k=k.to(dtype), v=v.to(dtype), g=g, beta=beta)
    return {n: (None if t is None else t.to(device)) for n, t in out.items()}


def share_keys(x: dict, group: int) -> dict:
    """Give the value heads of each key head one key, as models with ``HV / group`` key heads have them: adds
    ``x["k_heads"]`` ``[T, B, HV // group, K]`` (the key of each group's first value head; what a cache with shared
    keys, ``num_key_heads = HV // group``, takes) and makes ``x["k"]`` ``[T, B, HV, K]`` those keys repeated per
    value head (what the oracle, the anchors and a cache with a key per value head take). ``group`` 1: ``k_heads``
    is ``k``. Returns ``x``."""
    if group < 1 or x["k"].shape[2] % group:
        raise ValueError(f"key group {group} does not divide the {x['k'].shape[2]} value heads")
    x["k_heads"] = x["k"][:, :, ::group].contiguous()
    if group > 1:
        x["k"] = x["k_heads"].repeat_interleave(group, dim=2)
    return x
