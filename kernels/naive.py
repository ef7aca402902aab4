"""Float64 oracle of the plain recurrences (DESIGN.md sec. 2): the ground truth.

One function for the three families. Per head the state ``S`` is ``[V, K]``
(rows = value dim, contiguous = key dim); decays arrive as log decays ``g``::

    a_t = exp(g_t)                         (mamba2, gdn: scalar per head; kda: [K])
    S'  = S_{t-1} diag(a_t)                (scalar a_t: a_t * S_{t-1})
    u_t = beta_t (v_t - S' k_t)            (gdn, kda: delta rule)   |  u_t = v_t  (mamba2)
    S_t = S' + u_t k_t^T
    o_t = S_t q_t

Mamba-2 maps onto this with q = C, k = B, v = dt * x, g = dt * A (the adapter
adds D * x and the gating). Everything here runs in float64 on whatever device
the inputs live on; it is slow and simple on purpose.
"""

from __future__ import annotations

import torch

FAMILIES = ("mamba2", "gdn", "kda")
DELTA_RULE = {"mamba2": False, "gdn": True, "kda": True}
PER_KEY_DECAY = {"mamba2": False, "gdn": False, "kda": True}


def check_family(family: str) -> str:
    """Return ``family`` if known; ``ValueError`` listing the valid families otherwise."""
    if family not in FAMILIES:
        raise ValueError(f"unknown recurrence family {family!r}; valid families: {', '.join(FAMILIES)}")
    return family


def oracle_step(family: str, S: torch.Tensor, q, k, v, g, beta=None):
    """One step of the plain recurrence in float64.

    Args:
        family: ``mamba2`` | ``gdn`` | ``kda``.
        S: state ``[..., HV, V, K]`` (any float dtype; computed in float64).
        q, k: ``[..., HV, K]``; v: ``[..., HV, V]``.
        g: log decay, ``[..., HV]`` (kda: ``[..., HV, K]``), <= 0.
        beta: ``[..., HV]`` for gdn/kda, ``None`` for mamba2.

    Returns:
        ``(o float64 [..., HV, V], S_new float64 [..., HV, V, K])``.
    """
    check_family(family)
    d = torch.float64
    S, q, k, v, g = (t.to(d) for t in (S, q, k, v, g))
    a = torch.exp(g)
    if PER_KEY_DECAY[family]:
        S = S * a.unsqueeze(-2)
    else:
        S = S * a[..., None, None]
    if DELTA_RULE[family]:
        if beta is None:
            raise ValueError(f"family {family!r} needs beta [..., HV]")
        u = beta.to(d).unsqueeze(-1) * (v - torch.einsum("...vk,...k->...v", S, k))
    else:
        u = v
    S = S + u.unsqueeze(-1) * k.unsqueeze(-2)
    o = torch.einsum("...vk,...k->...v", S, q)
    return o, S


def oracle_sequence(family: str, S0: torch.Tensor, q, k, v, g, beta=None):
    """Run ``T`` steps of the plain recurrence in float64.

    Args:
        S0: initial state ``[B, HV, V, K]``.
        q, k: ``[T, B, HV, K]``; v: ``[T, B, HV, V]``; g: ``[T, B, HV]`` (kda ``[T, B, HV, K]``);
            beta: ``[T, B, HV]`` or ``None`` (mamba2).

    Returns:
        ``(o float64 [T, B, HV, V], states float64 [T, B, HV, V, K])`` where
        ``states[t]`` is the state after step ``t``.
    """
    S = S0.to(torch.float64)
    outs, states = [], []
    for t in range(q.shape[0]):
        o, S = oracle_step(family, S, q[t], k[t], v[t], g[t], None if beta is None else beta[t])
        outs.append(o)
        states.append(S)
    return torch.stack(outs), torch.stack(states)
