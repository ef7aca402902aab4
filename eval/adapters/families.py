"""Per-family translation between a transformers SSM layer and :class:`SSMStateCache`.

Each supported mixer class calls one module-level recurrent-step function of
its ``modeling_*.py`` on the cached single-token decode path:

============================  ===============================================  ======
mixer class                   decode-step function (module global)             family
============================  ===============================================  ======
``Qwen3_5GatedDeltaNet``      ``torch_recurrent_gated_delta_rule``             gdn
``Qwen3NextGatedDeltaNet``    ``torch_recurrent_gated_delta_rule``             gdn
``Mamba2Mixer``               ``mamba2_selective_state_update``                mamba2
``NemotronHMamba2Mixer``      ``mamba2_selective_state_update``                mamba2
``KimiLinearDeltaAttention``  ``recurrent_kimi_delta_attention``               kda
============================  ===============================================  ======

A :class:`Family` knows, for its function: the layer's state sizes, how to
turn the model's fp32 recurrent state (from the HF cache after prefill) into
our ``[B, HV, V, K]`` layout, and how to turn one call of the function into one
``SSMStateCache.step`` call plus the function's return value. Everything else
(projections, conv1d, gating, norms) stays the model's own code.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

#: ``run(q [B,HV,K], k [B,HV,K], v [B,HV,V], g [B,HV] or [B,HV,K], beta [B,HV] | None) -> o [B,HV,V]`` fp32
RunStep = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Family:
    """How one kind of transformers SSM layer maps onto the state cache.

    Attributes:
        name: cache family, ``"gdn"``, ``"kda"`` or ``"mamba2"``.
        fn_name: name of the module-level decode-step function in the layer's modeling module.
    """

    name: str
    fn_name: str

    # ---- sizes and state layout -------------------------------------------------
    def dims(self, layer) -> tuple[int, int, int]:
        """``(HV, K, V)``: value heads, key dim, value dim of one head's state."""
        if self.name == "gdn":
            return layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
        if self.name == "kda":
            return layer.num_heads, layer.head_dim, layer.head_dim
        return layer.num_heads, layer.ssm_state_size, layer.head_dim

    def state_to_vk(self, hf_state: torch.Tensor) -> torch.Tensor:
        """HF recurrent state -> float32 ``[B, HV, V, K]``.

        GDN/KDA states are ``[B, HV, K, V]`` (fla convention): transposed.
        Mamba-2 ``ssm_states`` are ``[B, H, headdim, dstate]`` = ``[V, K]`` already.
        """
        s = hf_state.float()
        if self.name in ("gdn", "kda"):
            s = s.transpose(-1, -2)
        return s.contiguous()

    # ---- one decode step ------------------------------------------------------------
    def step(self, sig: inspect.Signature, layer_module_globals: dict, run: RunStep, args, kwargs):
        """Replace one call ``orig(*args, **kwargs)`` (``sig`` = its signature) by ``run(...)``.

        Returns what the model's function would return.
        """
        a = sig.bind(*args, **kwargs).arguments
        extra = a.get("kwargs", {})
        if self.name == "mamba2":
            return _mamba2_step(a, extra, run)
        return _delta_step(self.name, a, layer_module_globals, run)


def _delta_step(family: str, a: dict, g_ns: dict, run: RunStep):
    """GDN / KDA: inputs ``[B, 1, HV, *]``; returns ``(out [B, 1, HV, V], state_passthrough)``."""
    query, key, value = a["query"], a["key"], a["value"]
    if query.shape[1] != 1:
        raise RuntimeError(f"replayssm decode hook got {query.shape[1]} tokens; it handles single-token decode only")
    dtype = query.dtype
    q, k, v = (x[:, 0].float() for x in (query, key, value))
    g = a["g"][:, 0].float()            # gdn: [B, HV]; kda: [B, HV, K]
    beta = a["beta"][:, 0].float()      # [B, HV]
    if a.get("use_qk_l2norm_in_kernel", False):
        l2norm = g_ns["l2norm"]          # the model's own l2norm (eps conventions differ per family)
        q, k = l2norm(q, dim=-1, eps=1e-6), l2norm(k, dim=-1, eps=1e-6)
    q = q * (q.shape[-1] ** -0.5)
    o = run(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), beta.contiguous())
    return o[:, None].to(dtype), a.get("initial_state")


def _mamba2_step(a: dict, extra: dict, run: RunStep):
    """Mamba-2 ``selective_state_update``: returns ``out [B, H, P]`` (D skip and optional z gate applied)."""
    x = a["hidden_states"]               # [B, H, P]
    dtype = x.dtype
    xf = x.float()
    dt = a["dt"][..., 0].float()         # [B, H] (the model expands it over P)
    if a.get("dt_bias") is not None:
        dt = dt + a["dt_bias"][..., 0].float()
    if a.get("dt_softplus", False):
        dt = F.softplus(dt)
    A = a["A"][:, 0, 0].float()          # [H]
    Bm, Cm = a["B"].float(), a["C"].float()   # [B, G, N]
    H, G = xf.shape[1], Bm.shape[1]
    k = Bm.repeat_interleave(H // G, dim=1)   # head h uses group h // (H / G), as the model
    q = Cm.repeat_interleave(H // G, dim=1)
    v = dt[..., None] * xf
    g = dt * A[None]
    o = run(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), None)
    D = a.get("D")
    if D is not None:
        o = o + xf * D.float()
    z = a.get("z")
    if z is not None:
        o = o * F.silu(z.float())
    return o.to(dtype)


GDN = Family("gdn", "torch_recurrent_gated_delta_rule")
KDA = Family("kda", "recurrent_kimi_delta_attention")
MAMBA2 = Family("mamba2", "mamba2_selective_state_update")

#: mixer class name -> family
MIXER_FAMILIES: dict[str, Family] = {
    "Qwen3_5GatedDeltaNet": GDN,
    "Qwen3_5MoeGatedDeltaNet": GDN,
    "Qwen3NextGatedDeltaNet": GDN,
    "Mamba2Mixer": MAMBA2,
    "NemotronHMamba2Mixer": MAMBA2,
    "KimiLinearDeltaAttention": KDA,
    "KimiDeltaAttention": KDA,
}

SUPPORTED_MODELS = "Qwen3.5 / Qwen3-Next (GDN), Nemotron-H / Mamba2 (Mamba-2), Kimi-Linear (KDA)"


def family_of(module) -> Family | None:
    """The :class:`Family` of an ``nn.Module`` if it is a supported SSM mixer, else ``None``."""
    fam = MIXER_FAMILIES.get(type(module).__name__)
    if fam is None:
        return None
    mod = sys.modules[type(module).__module__]
    if not hasattr(mod, fam.fn_name):
        raise RuntimeError(
            f"{type(module).__name__} in {mod.__name__} has no {fam.fn_name}(); this transformers version "
            "is not the one the adapter was written for (5.17.x)")
    return fam
