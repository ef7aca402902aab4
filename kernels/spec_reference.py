"""Torch references of speculative verification (DESIGN.md sec. 3, Algorithm 2), in the kernels' operation order.

Replay (:func:`verify_rows`): ``T`` tokens per row are verified output-only from the read copy ``S_lp`` and the
slot's ``h`` committed ring entries, never materialising a state. With ``G`` the cumulative log decays (the ring's
``G_0 .. G_{h-1}``, then ``G_{h+t} = G_{h+t-1} + g_t`` added in fp32 token by token, as ``h + t`` steps would),
``gam_t = exp(G_{h+t})`` and per token ``t``::

    Pq_t = S_lp (gam_t q_t),  Pk_t = S_lp (gam_t k_t)                          (fp32 dots over the key dim)
    Cq_tj = (k_j . q_t) exp(G_{h+t} - G_j),  Ck_tj likewise with k_t            (ring entries j < h)
    Wq_ti = (k_i . q_t) exp(G_{h+t} - G_{h+i}) (i <= t),  Wk_ti with k_t (i < t)  (the window's own entries)
    u = (I + diag(beta) Wk)^{-1} (beta (v - (Ck U_ring + Pk)))                 (gdn, kda; mamba2: u = v)
    o = (Cq U_ring + Pq) + Wq u

(kda: the decays are per key channel and sit inside the key products.) The triangular solve is the flush's
nilpotent product (:func:`.reference.nilpotent_inverse`). The ``T`` inputs are then written into the ring past
the committed entries (positions ``h .. h + T - 1``: cumulative log decay, k, the corrections u, the raw v and
beta where the ring keeps them), and into the slot's draft buffers the raw log decays (and, for a shared
delta-rule spec, whose ring keeps no raw inputs, the raw v and beta): what :mod:`.spec_decode`'s commit needs.
The committed ring count does not move. The kernel's tiles (:mod:`.verify`) stack, for the delta rule, each
token's query and key as two rows of one tile (:func:`verify_rows_layout`): then ``Pq`` and ``Pk`` are one dot,
``Cq`` and ``Ck`` another, ``Wq`` and ``Wk`` a third (the key rows of ``W``, strictly lower on the key columns, are
the solve's matrix; its query rows give the outputs), and the key rows carry the corrections through the solve.
Rows are zero-padded to :func:`verify_rows_layout`, ring entries to :func:`verify_ring_entries`, keys to
:func:`.reference.block_k`, value rows to the next power of two (min 16): this module builds the same tiles,
whose ``tl.dot`` is a numpy matmul under the interpreter, so the outputs and every ring entry are bit-identical to
the kernel's there.

Conventional (:func:`conventional_verify_rows`, the snapshot baseline): the rounded checkpoint is stepped token by
token (the conventional step's arithmetic, :func:`.reference.seq_step`), each token's output ``S_t q_t`` is
computed from the fp32 state and the state is written, rounded into the checkpoint format (SR counter c2 = the
slot's flush counter + t, stream tag 1), as snapshot ``t`` of the slot; the next token continues from that rounded
snapshot. Commit copies snapshot ``accepted - 1`` into the checkpoint: exactly ``accepted`` conventional steps.
"""

from __future__ import annotations

import numpy as np
import torch

from .reference import _dot, _np, block_k, cached_corrections, exp32, nilpotent_inverse, rowsum, seq_step
from .storage import TAG_CONVENTIONAL, sr_rbits


def verify_rows_layout(T: int, delta: bool) -> tuple[int, int]:
    """``(TH, TR)`` of the verify tiles for ``T`` tokens: the delta rule stacks each token's query (row ``t``) and
    key (row ``TH + t``, ``TH`` = next power of two >= T) in one ``TR = max(16, 2 TH)``-row tile, so one dot over the
    key dim serves both (the key rows give the corrections' state and ring terms); without it (mamba2) only the
    queries, ``TH = TR`` = next power of two >= T, min 16 (``tl.dot``)."""
    th = 1 << (int(T) - 1).bit_length()
    return (th, max(16, 2 * th)) if delta else (max(16, th), max(16, th))


def verify_row_roles(T: int, delta: bool):
    """Per row of the stacked tile (:func:`verify_rows_layout`): ``(tok, isk, colr)``, int / bool numpy ``[TR]``:
    the row's token, whether it is a key row, whether it holds a window entry (a key row; every row without the
    delta rule). Rows past the last token have ``tok >= T``."""
    TH, TR = verify_rows_layout(T, delta)
    r = np.arange(TR)
    isk = (r >= TH) if delta else np.zeros(TR, bool)
    tok = np.where(isk, r - TH, r)
    return tok, isk, (isk if delta else np.ones(TR, bool))


def verify_ring_entries(capacity: int) -> int:
    """Ring rows of the verify tiles: next power of two >= the ring capacity, min 16 (``tl.dot``)."""
    return max(16, 1 << (int(capacity) - 1).bit_length())


def value_rows(V: int) -> int:
    """Value rows of the verify tiles (the whole head): next power of two >= V, min 16."""
    return max(16, 1 << (int(V) - 1).bit_length())


def _pad_rows(x: np.ndarray, axis: int, n: int) -> np.ndarray:
    """Zero-pad ``x`` along ``axis`` to ``n``."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, n - x.shape[axis])
    return np.pad(x, pad)


def _stacked(x: torch.Tensor, nt: int, rows, width: int) -> np.ndarray:
    """``x [n, T, HV, X]`` on the rows of the stacked tile: row ``r`` holds token ``rows[r]`` where ``rows[r] >= 0``
    and ``< nt``, zero elsewhere; float32 numpy ``[n, HV, TR, width]`` (X zero-padded to ``width``)."""
    n, _, HV = x.shape[:3]
    y = np.zeros((n, HV, len(rows), width), np.float32)
    xs = _np(x[:, :nt].transpose(1, 2), width)
    for r, t in enumerate(rows):
        if 0 <= t < nt:
            y[:, :, r] = xs[:, :, t]
    return y


def _window_terms(cache, slots, h: int, nt: int, T: int, X, Xc, g, tok):
    """The stacked rows' cumulative log decays ``Gs`` (row ``r``: token ``tok[r]``'s) and, for per-key decays (kda),
    the ring and window key products ``C [n, HV, TR, RP]``, ``W [n, HV, TR, TR]`` of every row, as the kernel's
    token loop computes them (``C``, ``W`` ``None`` for a scalar decay, whose products are dots)."""
    n, HV, TR, BK = X.shape
    RP = verify_ring_entries(cache.ring_k.shape[2])
    per_key = cache.per_key
    GKP = BK if per_key else 1
    Gprev = np.zeros((n, HV, GKP), np.float32)
    if h > 0:
        Gprev = _np(cache.ring_g[slots][:, :, h - 1], GKP) if per_key else \
            np.ascontiguousarray(cache.ring_g[slots][:, :, h - 1].cpu().numpy())
    gn = np.zeros((n, HV, T, GKP), np.float32)
    gn[:, :, :nt] = _np(g[:, :nt].transpose(1, 2), GKP) if per_key else g[:, :nt].transpose(1, 2).cpu().numpy()
    Gs = np.zeros((n, HV, TR, GKP), np.float32)
    C = W = None
    if per_key:
        Kr, Gr = _ring_keys(cache, slots, h, RP, BK)
        C = np.zeros((n, HV, TR, RP), np.float32)
        W = np.zeros((n, HV, TR, TR), np.float32)
    for t in range(T):
        Gprev = Gprev + gn[:, :, t]
        Gs[:, :, tok == t] = Gprev[:, :, None]
        if per_key:
            for r in np.flatnonzero(tok == t):     # the token's query row and (delta rule) key row
                xt = X[:, :, r][:, :, None, :]
                dec = np.exp(np.minimum(Gprev[:, :, None, :] - Gr, np.float32(0.0)))
                C[:, :, r] = np.sum(Kr * dec * xt, axis=-1)
                dw = np.exp(np.minimum(Gprev[:, :, None, :] - Gs, np.float32(0.0)))
                W[:, :, r] = np.sum(Xc * dw * xt, axis=-1)
    return (Gs if per_key else Gs[..., 0]), C, W


def _ring_keys(cache, slots, h: int, RP: int, BK: int):
    """The ``h`` committed ring entries' keys per value head ``[n, HV, RP, BK]`` and cumulative log decays (``[n,
    HV, RP]``; kda ``[n, HV, RP, BK]``), zero past ``h``, float32 numpy."""
    n, HV = slots.numel(), cache.num_heads
    Kr = np.zeros((n, HV, RP, BK), np.float32)
    Kr[:, :, :h] = _np(cache.value_head_keys(cache.ring_k[slots][:, :, :h], dim=1), BK)
    if cache.per_key:
        Gr = np.zeros((n, HV, RP, BK), np.float32)
        Gr[:, :, :h] = _np(cache.ring_g[slots][:, :, :h], BK)
    else:
        Gr = np.zeros((n, HV, RP), np.float32)
        Gr[:, :, :h] = cache.ring_g[slots][:, :, :h, 0].cpu().numpy()
    return Kr, Gr


def verify_rows(cache, slots, h: int, nt: int, q, k, v, g, beta, write_draft: bool = True):
    """Verify ``nt`` tokens of rows whose slots ``slots`` (int64 ``[n]``, >= 0) all hold ``h`` committed ring
    entries (module doc); writes the ring entries ``h .. h + nt - 1`` and (``write_draft``) the draft buffers.

    Args:
        q, k: float32 ``[n, T, HV, K]`` (k per value head: a cache with shared keys, ``key_group`` > 1, keeps
            the first of each group's copies in its ring); v: ``[n, T, HV, V]``; g: ``[n, T, HV, GK]`` log decays; beta:
            ``[n, T, HV]`` (a dummy for mamba2). Tokens ``nt .. T - 1`` are ignored.

    Returns:
        float32 ``[n, T, HV, V]`` (tokens past ``nt``: whatever the padded arithmetic gives; callers drop them).
    """
    n, T, HV, K = q.shape
    V = v.shape[-1]
    dev = v.device
    BK, BVA = block_k(K), value_rows(V)
    RP = verify_ring_entries(cache.ring_k.shape[2])
    sw = lambda x: np.swapaxes(x, -1, -2)   # noqa: E731
    tok, isk, colr = verify_row_roles(T, cache.delta)
    qrows = np.where(isk, -1, tok)
    X = _stacked(q, nt, qrows, BK)
    if cache.delta:
        X = np.where(isk[:, None], _stacked(k, nt, np.where(isk, tok, -1), BK), X)
        Xc = X
    else:
        Xc = _stacked(k, nt, tok, BK)
    crows = np.where(colr, tok, -1)
    Vc = _stacked(v, nt, crows, BVA)
    bts = _stacked(beta[..., None], nt, crows, 1)[..., 0] if cache.delta else None
    Gs, C, W = _window_terms(cache, slots, h, nt, T, X, Xc, g, tok)
    S = _pad_rows(_np(cache.lp.decode(slots), BK), 2, BVA)                       # [n, HV, BVA, BK]
    gX = X * np.exp(Gs) if cache.per_key else X * np.exp(Gs)[..., None]
    P = _dot(gX, sw(S))                                                             # [n, HV, TR, BVA]
    Kr, Gr = _ring_keys(cache, slots, h, RP, BK)
    Ur = np.zeros((n, HV, RP, BVA), np.float32)
    ring_u = cache.ring_u if cache.delta else cache.ring_v
    Ur[:, :, :h, :V] = ring_u[slots][:, :, :h].float().cpu().numpy()
    if not cache.per_key:
        C = _dot(X, sw(Kr)) * np.exp(np.minimum(Gs[..., :, None] - Gr[..., None, :], np.float32(0.0)))
        W = _dot(X, sw(Xc)) * np.exp(np.minimum(Gs[..., :, None] - Gs[..., None, :], np.float32(0.0)))
    zero = np.float32(0.0)
    C = np.where(np.arange(RP) < h, C, zero)
    keep = colr[None, :] & ((tok[None, :] < tok[:, None]) | (~isk[:, None] & (tok[None, :] == tok[:, None])))
    W = np.where(keep, W, zero)
    Z = _dot(C, Ur) + P
    if cache.delta:
        rhs = bts[..., None] * (Vc - Z)
        U = _dot(nilpotent_inverse(W * bts[..., None]), rhs)
    else:
        U = Vc
    O = Z + _dot(W, U)
    # ring entries h .. h + nt - 1 (past the committed ones) and the draft buffers
    pos = slice(h, h + nt)
    wr = np.flatnonzero(colr & (tok < nt))                        # the window rows, in token order
    G_new = torch.from_numpy(np.ascontiguousarray(Gs[:, :, wr])).to(dev)
    cache.ring_g[slots, :, pos] = G_new[..., :K] if cache.per_key else G_new[..., None]
    kt = k[:, :nt, ::cache.key_group].transpose(1, 2)
    cache.ring_k[slots, :, pos] = kt.to(cache.ring_k.dtype)
    vt = v[:, :nt].transpose(1, 2)
    bt_t = beta[:, :nt].transpose(1, 2)
    if cache.delta:
        cache.ring_u[slots, :, pos] = torch.from_numpy(np.ascontiguousarray(U[:, :, wr, :V])).to(dev)
    if not cached_corrections(cache):
        cache.ring_v[slots, :, pos] = vt.to(cache.ring_v.dtype)
        if cache.delta:
            cache.ring_beta[slots, :, pos] = bt_t
    if write_draft:
        cache.draft_g[slots, :, :nt] = g[:, :nt].transpose(1, 2)
        if cached_corrections(cache):
            cache.draft_v[slots, :, :nt] = vt.to(cache.draft_v.dtype)
            cache.draft_beta[slots, :, :nt] = bt_t
    qr = np.array([np.flatnonzero(~isk & (tok == t))[0] for t in range(T)])   # token t's query row
    return torch.from_numpy(np.ascontiguousarray(O[:, :, qr, :V])).to(dev).transpose(1, 2)


def conventional_verify_rows(cache, slots, q, k, v, g, beta):
    """The snapshot baseline (module doc) for rows of slots ``slots`` (int64 ``[n]``, >= 0): ``T`` conventional
    steps from the checkpoint, snapshot ``t`` of slot ``s`` stored at index ``s * max_draft + t`` of
    ``cache.snap``. Inputs as :func:`verify_rows`; returns float32 ``[n, T, HV, V]``."""
    n, T, HV, K = q.shape
    S = cache.hp.decode(slots)
    fc = cache.flush_count[slots]
    outs = []
    for t in range(T):
        S, _ = seq_step(S, exp32(g[:, t]), k[:, t], v[:, t], beta[:, t], cache.delta)
        outs.append(rowsum(S * q[:, t].unsqueeze(-2)))
        rb = None
        if cache.spec.sr:
            rb = sr_rbits(cache.seed, slots, HV, cache.head_v, K, fc + t, TAG_CONVENTIONAL)
        snap = slots * cache.max_draft + t
        cache.snap.encode(snap, S, rb)
        S = cache.snap.decode(snap)
    return torch.stack(outs, 1)
