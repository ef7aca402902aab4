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


def _entry_step(family, S, k, v, g, beta, u=None):
    """One recurrence step in float64 with the correction ``u`` given (a cached one) or computed from ``S``.
    Returns ``(S_new, u)``; shapes as :func:`oracle_step` (``S [..., HV, V, K]``)."""
    a = torch.exp(g)
    S = S * (a.unsqueeze(-2) if PER_KEY_DECAY[family] else a[..., None, None])
    if u is None:
        u = beta.unsqueeze(-1) * (v - torch.einsum("...vk,...k->...v", S, k)) if DELTA_RULE[family] else v
    return S + u.unsqueeze(-1) * k.unsqueeze(-2), u


def replay_decode(family: str, S0: torch.Tensor, q, k, v, g, beta=None, window: int = 16, read=None,
                  recur=None):
    """Algorithm 1 (replay decode) and Algorithm 3 (dual checkpoint) in float64, step by step (DESIGN.md sec. 3).

    The state is a checkpoint plus a ring of the inputs since it; every ``window``-th step flushes. ``recur`` /
    ``read``: functions rounding a float64 state ``[B, HV, V, K]`` into the recurrence / read format (None: exact).
    ``read=None`` is Algorithm 1 (one checkpoint serves reads and the recurrence; the flush uses the corrections
    cached by the non-flush steps); a ``read`` function is Algorithm 3: non-flush steps read the read copy and cache
    corrections computed from it (outputs only), the flush replays the ring from the recurrence checkpoint
    recomputing every correction from the raw ``v_j``, ``beta_j``, and casts the new state into both formats.

    Args: as :func:`oracle_sequence` (``S0 [B, HV, V, K]``, inputs ``[T, B, ...]``), all rows in phase.
    Returns: ``(o float64 [T, B, HV, V], ckpt float64 [T, B, HV, V, K])``, ``ckpt[t]`` the recurrence checkpoint
    after step ``t``.
    """
    check_family(family)
    d, same = torch.float64, (lambda x: x)
    recur, rd = recur or same, read or recur or same
    S0 = S0.to(d)
    hp, lp = recur(S0), rd(S0)
    ring, outs, ckpts = [], [], []
    for t in range(q.shape[0]):
        qt, kt, vt, gt = (x[t].to(d) for x in (q, k, v, g))
        bt = None if beta is None else beta[t].to(d)
        if len(ring) + 1 < window:   # non-flush: output from the read copy + ring; cache this step's correction
            S = lp
            for kj, vj, gj, bj, uj in ring:
                S, _ = _entry_step(family, S, kj, vj, gj, bj, uj)
            S, u = _entry_step(family, S, kt, vt, gt, bt)
            ring.append((kt, vt, gt, bt, u))
        else:                        # flush: rebuild S_L from the recurrence checkpoint, cast it into both copies
            S = hp
            for kj, vj, gj, bj, uj in ring:
                S, _ = _entry_step(family, S, kj, vj, gj, bj, uj if read is None else None)
            S, _ = _entry_step(family, S, kt, vt, gt, bt)
            hp, lp, ring = recur(S), rd(S), []
        outs.append(torch.einsum("...vk,...k->...v", S, qt))
        ckpts.append(hp)
    return torch.stack(outs), torch.stack(ckpts)
