"""Per-family translation between a transformers SSM layer and :class:`SSMStateCache`.

Each supported mixer class calls one module-level recurrent-step function of
its ``modeling_*.py`` on the cached single-token decode path, and one chunked
function on multi-token forwards (prefill, and a cached multi-token forward,
which the chunked teacher-forced evaluation uses):

============================  ===================================  ================================  ======
mixer class                   decode-step function (module global) multi-token function              family
============================  ===================================  ================================  ======
``Qwen3_5GatedDeltaNet``      ``torch_recurrent_gated_delta_rule`` ``torch_chunk_gated_delta_rule``  gdn
``Qwen3NextGatedDeltaNet``    ``torch_recurrent_gated_delta_rule`` ``torch_chunk_gated_delta_rule``  gdn
``Mamba2Mixer``               ``mamba2_selective_state_update``    ``mamba2_chunk_scan``             mamba2
``NemotronHMamba2Mixer``      ``mamba2_selective_state_update``    ``mamba2_chunk_scan``             mamba2
``KimiLinearDeltaAttention``  ``recurrent_kimi_delta_attention``   ``chunk_kimi_delta_attention``    kda
============================  ===================================  ================================  ======

A :class:`Family` knows, for its functions: the layer's state sizes, how to
turn the model's fp32 recurrent state (from the HF cache after prefill) into
our ``[B, HV, V, K]`` layout, how to turn one call of the step function into one
``SSMStateCache.step`` call plus the function's return value, and one call of the
multi-token function into one chunked call over its ``T`` tokens
(:func:`replayssm_quant.kernels.chunked.chunked_forward`) with the same input
transforms as the step. Everything else (projections, conv1d, gating, norms)
stays the model's own code.
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
#: the same over ``T`` tokens: inputs ``[B, T, HV, *]``, output fp32 ``[B, T, HV, V]``
RunChunk = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Family:
    """How one kind of transformers SSM layer maps onto the state cache.

    Attributes:
        name: cache family, ``"gdn"``, ``"kda"`` or ``"mamba2"``.
        fn_name: name of the module-level decode-step function in the layer's modeling module.
        chunk_fn_name: name of the module-level multi-token (chunked) function there.
    """

    name: str
    fn_name: str
    chunk_fn_name: str

    # ---- sizes and state layout -------------------------------------------------
    def dims(self, layer) -> tuple[int, int, int]:
        """``(HV, K, V)``: value heads, key dim, value dim of one head's state."""
        if self.name == "gdn":
            return layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
        if self.name == "kda":
            return layer.num_heads, layer.head_dim, layer.head_dim
        return layer.num_heads, layer.ssm_state_size, layer.head_dim

    def key_heads(self, layer) -> int:
        """``HK``: the layer's key heads (Qwen3.5 / Qwen3-Next ``num_k_heads``, Mamba-2 ``n_groups`` of B; KDA: one
        per head). The model repeats each for ``HV / HK`` value heads (``repeat_interleave``: value head ``h`` uses
        key head ``h // (HV / HK)``) before the functions this family hooks, so the hooks see keys per value head."""
        if self.name == "gdn":
            return layer.num_k_heads
        if self.name == "mamba2":
            return layer.n_groups
        return layer.num_heads

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

    def chunk(self, sig: inspect.Signature, layer_module_globals: dict, run: RunChunk, args, kwargs):
        """Replace one call of the multi-token function (``sig`` = its signature) by ``run(...)`` over its tokens.

        Returns what the model's function would return (the recurrent state passed through, as the step does).
        """
        a = sig.bind(*args, **kwargs).arguments
        if self.name == "mamba2":
            return _mamba2_chunk(a, run)
        return _delta_chunk(a, layer_module_globals, run)


def _delta_step(family: str, a: dict, g_ns: dict, run: RunStep):
    """GDN / KDA: inputs ``[B, 1, HV, *]``; returns ``(out [B, 1, HV, V], state_passthrough)``."""
    query = a["query"]
    if query.shape[1] != 1:
        raise RuntimeError(f"replayssm decode hook got {query.shape[1]} tokens; it handles single-token decode only")
    q, k, v, g, beta = (x[:, 0].contiguous() for x in _delta_inputs(a, g_ns))   # g: gdn [B, HV]; kda [B, HV, K]
    o = run(q, k, v, g, beta)
    return o[:, None].to(query.dtype), a.get("initial_state")


def _delta_inputs(a: dict, g_ns: dict):
    """fp32 ``(q, k, v, g, beta)`` of a delta-rule call, tokens on dim 1 (``[B, T, HV, *]``): the model's
    l2norm when it asks for it in the kernel, q scaled by ``1 / sqrt(K)``."""
    q, k, v = (a[n].float() for n in ("query", "key", "value"))
    if a.get("use_qk_l2norm_in_kernel", False):
        l2norm = g_ns["l2norm"]          # the model's own l2norm (eps conventions differ per family)
        q, k = l2norm(q, dim=-1, eps=1e-6), l2norm(k, dim=-1, eps=1e-6)
    q = q * (q.shape[-1] ** -0.5)
    return q.contiguous(), k.contiguous(), v.contiguous(), a["g"].float().contiguous(), a["beta"].float().contiguous()


def _delta_chunk(a: dict, g_ns: dict, run: RunChunk):
    """GDN / KDA multi-token call: inputs ``[B, T, HV, *]``; returns ``(out [B, T, HV, V], state_passthrough)``."""
    o = run(*_delta_inputs(a, g_ns))
    return o.to(a["query"].dtype), a.get("initial_state")


def _mamba2_inputs(a: dict, dt, dt_bias, A, H: int):
    """Mamba-2 inputs as the recurrence sees them (``q = C``, ``k = B``, ``v = dt x``, ``g = dt A``), for
    ``x = a["hidden_states"] [..., H, P]``, ``dt [..., H]`` (raw, before bias and softplus), ``a["B"], a["C"]
    [..., G, N]``; dt_bias may be None."""
    x, Bm, Cm = a["hidden_states"], a["B"], a["C"]
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if a.get("dt_softplus", False):
        dt = F.softplus(dt)
    G = Bm.shape[-2]
    k = Bm.float().repeat_interleave(H // G, dim=-2)   # head h uses group h // (H / G), as the model
    q = Cm.float().repeat_interleave(H // G, dim=-2)
    return q.contiguous(), k.contiguous(), (dt[..., None] * x.float()).contiguous(), (dt * A.float()).contiguous()


def _mamba2_out(o, a: dict, D):
    """The D skip (``D`` broadcastable to ``x``) and the optional z gate, then the input dtype, as the model."""
    x = a["hidden_states"]
    if D is not None:
        o = o + x.float() * D.float()
    z = a.get("z")
    if z is not None:
        o = o * F.silu(z.float())
    return o.to(x.dtype)


def _mamba2_chunk(a: dict, run: RunChunk):
    """``mamba2_chunk_scan`` (``hidden_states [B, T, H, P]``, ``dt [B, T, H]``, ``B, C [B, T, G, N]``): the D skip
    (and an optional z gate) applied as the step does; dt is not clamped to ``dt_limit``, as the step path
    (``selective_state_update``) does not clamp either. Returns ``out`` (in the input dtype, as the step) or
    ``(out, initial_states)`` when final states are asked for."""
    o = run(*_mamba2_inputs(a, a["dt"], a.get("dt_bias"), a["A"], a["hidden_states"].shape[2]), None)
    D = a.get("D")
    o = _mamba2_out(o, a, None if D is None else D[:, None])
    return (o, a.get("initial_states")) if a.get("return_final_states", False) else o


def _mamba2_step(a: dict, extra: dict, run: RunStep):
    """Mamba-2 ``selective_state_update``: returns ``out [B, H, P]`` (D skip and optional z gate applied)."""
    bias = a.get("dt_bias")              # [H, P] like dt [B, H, P] (the model expands them over P)
    o = run(*_mamba2_inputs(a, a["dt"][..., 0], None if bias is None else bias[..., 0], a["A"][:, 0, 0],
                            a["hidden_states"].shape[1]), None)
    return _mamba2_out(o, a, a.get("D"))


GDN = Family("gdn", "torch_recurrent_gated_delta_rule", "torch_chunk_gated_delta_rule")
KDA = Family("kda", "recurrent_kimi_delta_attention", "chunk_kimi_delta_attention")
MAMBA2 = Family("mamba2", "mamba2_selective_state_update", "mamba2_chunk_scan")

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
    for fn in (fam.fn_name, fam.chunk_fn_name):
        if not hasattr(mod, fn):
            raise RuntimeError(
                f"{type(module).__name__} in {mod.__name__} has no {fn}(); this transformers version "
                "is not the one the adapter was written for (5.17.x)")
    return fam
