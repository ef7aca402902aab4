"""Chunked teacher-forced windows of an :class:`~.state_cache.SSMStateCache` (DESIGN.md sec. 3).

When the inputs of ``T`` tokens are known in advance (teacher forcing), one call processes them
all, window by window (window ``L`` = ``cache.window``; the slots must be at a window boundary,
i.e. their rings empty, as after ``load_state`` or a flush):

* the ``L - 1`` non-flush outputs of a window are the chunked recurrence started from the read
  copy ``S_lp`` (per head, with ``G_t`` the cumulative log decay since the checkpoint and
  ``d_{i:t} = exp(G_t - G_i)``, per key channel for kda)::

      u_t = beta_t (v_t - S_lp (e^{G_t} k_t) - sum_{i<t} u_i (k_i . d_{i:t} k_t))     (gdn, kda)
      u_t = v_t                                                                        (mamba2)
      o_t = S_lp (e^{G_t} q_t) + sum_{i<=t} u_i (k_i . d_{i:t} q_t)

  (the corrections ``u_t`` are computed by forward substitution, one fp32 row update per entry:
  exactly the cached corrections of the step path's non-flush steps, up to fp32 reassociation);
* the window's inputs then fill the cache's ring exactly as ``L - 1`` non-flush steps would
  (cumulative log decays summed in the same fp32 order, raw k / v / beta, the corrections ``u``),
  and the window's last token goes through :meth:`SSMStateCache.step`: the flush itself, i.e. the
  chunked recurrence from the recurrence checkpoint ``S_hp`` (:func:`.reference.chunked_flush_state`
  or the Triton flush kernel), its output ``S_L q``, the casts into ``S_hp`` (SR with the slot's flush
  counter as the Philox c2) and ``S_lp``. Rounding positions and Philox counters are therefore those
  of the step path by construction.

A trailing partial window (``T`` not a multiple of ``L``) fills the ring and does not flush, so the
cache is left as ``T`` decode steps would leave it (the step path can continue from it).
"""

from __future__ import annotations

import torch

from .reference import cached_corrections, cumulative_log_decay, exp32


def _window_reads(cache, slots, q, k, v, G, beta):
    """Outputs and corrections of ``m <= L - 1`` non-flush entries from the read copy.

    Args:
        q, k: float32 ``[n, HV, m, K]``; v: ``[n, HV, m, V]``; G: cumulative log decays
            ``[n, HV, m, GK]``; beta: ``[n, HV, m]`` (delta rule) or ``None``.

    Returns:
        ``(o float32 [n, HV, m, V], u float32 [n, HV, m, V])`` (``u`` is ``v`` for mamba2).
    """
    m = q.shape[2]
    S = cache.lp.decode(slots)                                                   # [n, HV, V, K]
    gam = exp32(G)                                                               # [n, HV, m, GK]
    causal = torch.ones(m, m, dtype=torch.bool, device=q.device).tril()          # [t, i]: i <= t
    diff = G[:, :, :, None] - G[:, :, None, :]                                   # [n, HV, t, i, GK]
    dec = torch.where(causal[..., None], exp32(torch.clamp(diff, max=0.0)), torch.zeros((), device=q.device))
    if cache.per_key:
        qk = torch.einsum("nhtk,nhik,nhtik->nhti", q, k, dec)
    else:
        qk = torch.einsum("nhtk,nhik->nhti", q, k) * dec[..., 0]
    read_q = torch.einsum("nhvk,nhtk->nhtv", S, gam * q)
    if not cache.delta:
        return read_q + torch.einsum("nhti,nhiv->nhtv", qk, v), v
    if cache.per_key:
        kk = torch.einsum("nhtk,nhik,nhtik->nhti", k, k, dec)
    else:
        kk = torch.einsum("nhtk,nhik->nhti", k, k) * dec[..., 0]
    read_k = torch.einsum("nhvk,nhtk->nhtv", S, gam * k)
    u = torch.empty_like(v)
    for t in range(m):                     # forward substitution: u_t needs u_0 .. u_{t-1}
        acc = read_k[:, :, t]
        if t:
            acc = acc + torch.einsum("nhi,nhiv->nhv", kk[:, :, t, :t], u[:, :, :t])
        u[:, :, t] = beta[:, :, t, None] * (v[:, :, t] - acc)
    return read_q + torch.einsum("nhti,nhiv->nhtv", qk, u), u


def _fill_ring(cache, slots, k, v, G, beta, u) -> None:
    """Write ``m`` entries into the (empty) rings of ``slots`` as ``m`` non-flush steps would."""
    m = k.shape[2]
    cache.ring_g[slots, :, :m] = G
    cache.ring_k[slots, :, :m] = k.to(cache.ring_k.dtype)
    if not cached_corrections(cache):            # raw v (and beta): mamba2 and separate specs keep them
        cache.ring_v[slots, :, :m] = v.to(cache.ring_v.dtype)
        if cache.delta:
            cache.ring_beta[slots, :, :m] = beta
    if cache.delta:
        cache.ring_u[slots, :, :m] = u
    cache.ring_count[slots] = m


def chunked_forward(cache, slots: torch.Tensor, q, k, v, g, beta=None) -> torch.Tensor:
    """Teacher-forced decode of ``T`` tokens per slot, window by window (module doc).

    Args:
        cache: the layer's :class:`SSMStateCache` (any mode; conventional = window 1: every token a flush).
        slots: int64 ``[n]`` distinct slot indices (>= 0) whose rings are empty (window boundary); the
            caller guarantees it (no host sync here besides the flush's own).
        q, k: ``[n, T, HV, K]``; v: ``[n, T, HV, V]``; g: log decays ``[n, T, HV]`` (kda ``[n, T, HV, K]``);
            beta: ``[n, T, HV]`` (gdn, kda) or ``None`` (mamba2). Any float dtype (computed in float32).

    Returns:
        float32 ``[n, T, HV, V]``: the outputs the step path would give (up to fp32 reassociation).
    """
    n, T, HV, _ = q.shape
    L = cache.window
    q, k, v, g = (x.float().transpose(1, 2) for x in (q, k, v, g))              # [n, HV, T, *]
    if not cache.per_key:
        g = g.unsqueeze(-1)                                                       # [n, HV, T, 1]
    beta = None if beta is None else beta.float().transpose(1, 2)                 # [n, HV, T]
    out = torch.empty(n, HV, T, v.shape[-1], dtype=torch.float32, device=v.device)
    for w0 in range(0, T, L):
        m = min(L - 1, T - w0)                     # non-flush entries of this window
        if m > 0:
            sl = slice(w0, w0 + m)
            G = torch.empty_like(g[:, :, sl])
            G_prev = torch.zeros_like(g[:, :, 0])
            for j in range(m):                     # the ring's fp32 order: G_j = G_{j-1} + g_j
                G_prev = G[:, :, j] = cumulative_log_decay(G_prev, g[:, :, w0 + j])
            b = None if beta is None else beta[:, :, sl]
            out[:, :, sl], u = _window_reads(cache, slots, q[:, :, sl], k[:, :, sl], v[:, :, sl], G, b)
            _fill_ring(cache, slots, k[:, :, sl], v[:, :, sl], G, b, u)
        t = w0 + m
        if t < min(w0 + L, T):                     # the flush token
            gt = g[:, :, t] if cache.per_key else g[:, :, t, 0]
            out[:, :, t] = cache.step(slots, q[:, :, t], k[:, :, t], v[:, :, t], gt,
                                      None if beta is None else beta[:, :, t], validate=False)
    return out.transpose(1, 2)
