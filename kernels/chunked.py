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

:func:`chunked_forward_many` does this for all caches of one layer in one call (a decode session's variants,
rows cache-major): the caches of one window share one window-read computation over all their rows (the read
copies decoded per cache, then one batch of contractions and one forward substitution), then each cache fills
its ring and flushes on its own. The inputs are kept token-major, so a flush token's inputs and output rows
are contiguous blocks (no copies around each :meth:`SSMStateCache.step`). :func:`chunked_forward` is the
one-cache case.
"""

from __future__ import annotations

import torch
from torch.profiler import record_function

from .reference import cached_corrections, cumulative_log_decay, exp32


def _window_reads(S, per_key: bool, delta: bool, q, k, v, G, beta):
    """Outputs and corrections of ``m <= L - 1`` non-flush entries from the read copies ``S``.

    Args:
        S: float32 ``[n, HV, V, K]``, the decoded read copy of each row's slot.
        per_key, delta: the family's per-key decay (kda) and delta rule (gdn, kda).
        q, k: float32 ``[n, HV, m, K]``; v: ``[n, HV, m, V]``; G: cumulative log decays
            ``[n, HV, m, GK]``; beta: ``[n, HV, m]`` (delta rule) or ``None``.

    Returns:
        ``(o float32 [n, HV, m, V], u float32 [n, HV, m, V])`` (``u`` is ``v`` for mamba2).
    """
    m = q.shape[2]
    gam = exp32(G)                                                               # [n, HV, m, GK]
    causal = torch.ones(m, m, dtype=torch.bool, device=q.device).tril()          # [t, i]: i <= t
    diff = G[:, :, :, None] - G[:, :, None, :]                                   # [n, HV, t, i, GK]
    dec = torch.where(causal[..., None], exp32(torch.clamp(diff, max=0.0)), torch.zeros((), device=q.device))
    if per_key:
        qk = torch.einsum("nhtk,nhik,nhtik->nhti", q, k, dec)
    else:
        qk = torch.einsum("nhtk,nhik->nhti", q, k) * dec[..., 0]
    read_q = torch.einsum("nhvk,nhtk->nhtv", S, gam * q)
    if not delta:
        return read_q + torch.einsum("nhti,nhiv->nhtv", qk, v), v
    if per_key:
        kk = torch.einsum("nhtk,nhik,nhtik->nhti", k, k, dec)
    else:
        kk = torch.einsum("nhtk,nhik->nhti", k, k) * dec[..., 0]
    read_k = torch.einsum("nhvk,nhtk->nhtv", S, gam * k)
    u = torch.empty_like(v)
    for t in range(m):                     # forward substitution: u_t needs u_0 .. u_{t-1}
        acc = read_k[:, :, t]
        if t:
            acc = acc + torch.einsum("nhi,nhiv->nhv", kk[:, :, t, :t], u[:, :, :t])
        torch.mul(beta[:, :, t, None], v[:, :, t] - acc, out=u[:, :, t])
    return read_q + torch.einsum("nhti,nhiv->nhtv", qk, u), u


def _read_copies(caches, slots: torch.Tensor) -> torch.Tensor:
    """float32 ``[len(caches) * n, HV, V, K]``: the decoded read copies of ``slots`` (int64 ``[n]``) of each cache,
    cache-major; the caches whose read copies share a storage format are decoded in one call (decoding is
    elementwise per stored row, so the values are those of one call per cache)."""
    from .storage import decode_state

    by_fmt: dict[str, list[int]] = {}
    for i, c in enumerate(caches):
        by_fmt.setdefault(c.lp.fmt.name, []).append(i)
    n = slots.numel()
    parts: list = [None] * len(caches)
    for members in by_fmt.values():
        lps = [caches[i].lp for i in members]
        backend = caches[members[0]].backend
        if len(lps) == 1:
            dec = lps[0].decode(slots, backend)
        else:
            cat = (lambda get: None if get(lps[0]) is None else torch.cat([get(lp)[slots] for lp in lps]))
            dec = decode_state(lps[0].fmt, cat(lambda lp: lp.data), cat(lambda lp: lp.scales),
                               cat(lambda lp: lp.s_enc), backend=backend)
        for j, i in enumerate(members):
            parts[i] = dec[j * n:(j + 1) * n]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _fill_ring(cache, slots, k, v, G, beta, u) -> None:
    """Write ``m`` entries into the (empty) rings of ``slots`` as ``m`` non-flush steps would: ``k [n, HK, m, K]``
    (one key per key head), ``v, u [n, HV, m, V]``, ``G [n, HV, m, GK]``, ``beta [n, HV, m]`` or ``None``."""
    m = k.shape[2]
    cache.ring_g[slots, :, :m] = G
    cache.ring_k[slots, :, :m] = k.to(cache.ring_k.dtype)
    if not cached_corrections(cache):            # raw v (and beta): mamba2 and separate specs keep them
        cache.ring_v[slots, :, :m] = v.to(cache.ring_v.dtype)
        if cache.delta:
            cache.ring_beta[slots, :, :m] = beta
    if cache.delta:
        cache.ring_u[slots, :, :m] = u
    cache.ring_count.index_fill_(0, slots, m)    # a fill (``ring_count[slots] = m`` copies m from the host)


def chunked_forward(cache, slots: torch.Tensor, q, k, v, g, beta=None) -> torch.Tensor:
    """Teacher-forced decode of ``T`` tokens per slot, window by window (module doc).

    Args:
        cache: the layer's :class:`SSMStateCache` (any mode; conventional = window 1: every token a flush).
        slots: int64 ``[n]`` distinct slot indices (>= 0) whose rings are empty (window boundary); the
            caller guarantees it (no host sync here besides the flush's own).
        q: ``[n, T, HV, K]``; k: ``[n, T, HK, K]`` (``HK = cache.num_key_heads``, ``HV`` by default); v: ``[n, T, HV,
            V]``; g: log decays ``[n, T, HV]`` (kda ``[n, T, HV, K]``);
            beta: ``[n, T, HV]`` (gdn, kda) or ``None`` (mamba2). Any float dtype (computed in float32).

    Returns:
        float32 ``[n, T, HV, V]``: the outputs the step path would give (up to fp32 reassociation).
    """
    return chunked_forward_many([cache], slots, q, k, v, g, beta)


def _rows(members: list[int], n: int, device):
    """Rows of the caches ``members`` (cache ``i``: rows ``i * n .. (i + 1) * n``): a slice when contiguous, else an
    int64 index tensor made on ``device`` (no host-to-device copy: the window may be recorded in a CUDA graph)."""
    if members == list(range(members[0], members[0] + len(members))):
        return slice(members[0] * n, (members[-1] + 1) * n)
    return torch.cat([torch.arange(i * n, (i + 1) * n, device=device) for i in members])


def chunked_forward_many(caches, slots: torch.Tensor, q, k, v, g, beta=None) -> torch.Tensor:
    """:func:`chunked_forward` of several caches of one layer at once (the variants of a decode session).

    Rows are cache-major: cache ``i`` holds rows ``i * n .. (i + 1) * n`` (``n = slots.numel()``, the same
    slots in every cache). Caches of one window share the window reads: one :func:`_window_reads` over all
    their rows (each cache's read copy decoded into its rows), so the per-entry forward substitution runs
    once per window for them all instead of once per cache; the rings are filled and the flushes run per
    cache, as :func:`chunked_forward` of each cache alone would. Every elementwise step is that of the
    single-cache call; the batched contractions differ from it at most by fp32 reassociation.

    Args:
        caches: the layer's :class:`SSMStateCache` list (one family and size, one ``num_key_heads``; any modes and
            windows).
        slots, g, beta: as :func:`chunked_forward`; q, k, v, g, beta with ``len(caches) * n`` rows; k ``[R, T, HK,
            K]`` with the caches' ``HK = num_key_heads`` (``HV`` unless the value heads share keys; the window reads
            use key head ``h // (HV / HK)`` for value head ``h``, the rings keep one key per key head).

    Returns:
        float32 ``[len(caches) * n, T, HV, V]``.
    """
    n = slots.numel()
    R, T, HV, _ = q.shape
    if R != len(caches) * n:
        raise ValueError(f"{R} rows for {len(caches)} caches of {n} slots")
    first = caches[0]
    if len({c.num_key_heads for c in caches}) > 1:
        raise ValueError("chunked_forward: the caches of one call must have the same num_key_heads, got "
                         f"{sorted({c.num_key_heads for c in caches})}")
    if k.shape[2] != first.num_key_heads:
        raise ValueError(f"chunked_forward: k must be [R, T, HK, K] with HK = num_key_heads = {first.num_key_heads} "
                         f"(HV = {HV}), got {tuple(k.shape)}")
    # token-major float32 copies [T, R, HV, *] (k: [T, R, HK, K]): a flush token of one cache, x[t, rows of the
    # cache], is contiguous (no per-step copies in SSMStateCache.step), and so is its output row block of ``out``
    q, k, v, g = (x.float().transpose(0, 1).contiguous() for x in (q, k, v, g))
    k_value_heads = first.value_head_keys(k)                                     # [T, R, HV, K]: the window reads'
    beta = None if beta is None else beta.float().transpose(0, 1).contiguous()   # [T, R, HV]
    out = torch.empty(T, R, HV, v.shape[-1], dtype=torch.float32, device=v.device)
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(caches):
        groups.setdefault(c.window, []).append(i)
    for L, members in groups.items():
        local = [(caches[i], slice(j * n, (j + 1) * n), slice(i * n, (i + 1) * n)) for j, i in enumerate(members)]
        rows = None
        for w0 in range(0, T, L):
            m = min(L - 1, T - w0)                     # non-flush entries of this window
            if m > 0:
                if rows is None:                       # the group's inputs for the window reads: [rows, HV, T, *]
                    rows = _rows(members, n, q.device)
                    qg, kg, vg, kring = (x[:, rows].permute(1, 2, 0, 3) for x in (q, k_value_heads, v, k))
                    gg = (g[:, rows].permute(1, 2, 0, 3) if first.per_key
                          else g[:, rows].permute(1, 2, 0).unsqueeze(-1))                # [rows, HV, T, GK]
                    bg = None if beta is None else beta[:, rows].permute(1, 2, 0)
                sl = slice(w0, w0 + m)
                with record_function("replayssm::window_reads"):
                    Gs = [torch.zeros_like(gg[:, :, 0])]
                    for j in range(m):                     # the ring's fp32 order: G_j = G_{j-1} + g_j
                        Gs.append(cumulative_log_decay(Gs[-1], gg[:, :, w0 + j]))
                    G = torch.stack(Gs[1:], 2)                                                  # [rows, HV, m, GK]
                    b = None if bg is None else bg[:, :, sl]
                    S = _read_copies([c for c, _, _ in local], slots)                           # [rows, HV, V, K]
                    o, u = _window_reads(S, first.per_key, first.delta, qg[:, :, sl], kg[:, :, sl], vg[:, :, sl],
                                         G, b)
                    out[sl, rows] = o.permute(2, 0, 1, 3)
                with record_function("replayssm::fill_ring"):
                    for c, lr, _ in local:
                        _fill_ring(c, slots, kring[lr, :, sl], vg[lr, :, sl], G[lr], None if b is None else b[lr],
                                   u[lr])
            t = w0 + m
            if t < min(w0 + L, T):                     # the flush token
                with record_function("replayssm::flush"):
                    for c, _, gr in local:
                        c.step(slots, q[t, gr], k[t, gr], v[t, gr], g[t, gr], None if beta is None else beta[t, gr],
                               out=out[t, gr], validate=False)
    return out.transpose(0, 1)
