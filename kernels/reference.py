"""Torch references of the decode algorithms (conventional, Algorithm 1 replay, Algorithm 3 dual).

These operate on the tensors of a :class:`~replayssm_quant.kernels.state_cache.SSMStateCache`
with exactly the operation order of the Triton kernel (:mod:`.decode`), so the
stored checkpoints are bit-identical between ``backend="torch"`` and
``backend="triton"`` under the Triton interpreter (row sums use the same numpy
reduction over a key dim zero-padded to the kernel's power-of-two block).

Flush semantics (shared by the kernel; see also docs/KERNELS.md)
-----------------------------------------------------------------
A slot's ring holds the ``h < L`` inputs received since its last flush
(capacity ``L - 1``). A step with ``h + 1 < L`` is a *non-flush* step: it reads
the read copy ``S_lp``, computes the output from ``S_lp`` plus the ring plus the
current input (DESIGN.md sec. 2 unrolled formula; for the delta rule the
current correction ``u_t`` uses ``S_{t-1} k_t`` from ``S_lp`` plus the ring),
and appends the current input as ring entry ``h``. A step with ``h + 1 == L`` is
the *flush* step: it reads the recurrence checkpoint ``S_hp``, replays the
``L - 1`` ring entries and the current input sequentially in fp32 (for
gdn/kda the corrections ``u_j = beta_j (v_j - a_j S_{j-1} k_j)`` are recomputed
from ``S_hp``; the ``u_j`` cached from ``S_lp`` are only used for outputs),
computes the output of the flush step from this fp32 state ``S_L``
(``o = S_L q``: no read-copy error on flush steps), casts ``S_L`` into ``S_hp``
(stochastic rounding with ``+sr``, Philox stream tag 0, c2 = the slot's flush
counter) and, for separate specs, independently into ``S_lp`` (RNE), then
empties the ring and increments the flush counter. Conventional decoding is
the same with ``L = 1`` (every step is a flush, no ring) and stream tag 1.
``load_state`` is flush number 0 (c2 = 0, tag 0); the counter is 1 afterwards.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .storage import sr_rbits


def block_k(K: int) -> int:
    """The kernel's key-dim block: next power of two >= K (min 16)."""
    return max(16, 1 << (int(K) - 1).bit_length())


def rowsum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last (key) dim, in the kernel's reduction order on CPU.

    ``x [..., K]`` float32 -> ``[...]``. On CPU the key dim is zero-padded to
    :func:`block_k` and reduced with ``numpy.sum``, which is what ``tl.sum``
    does under the Triton interpreter; elsewhere ``torch.sum``.
    """
    if x.device.type != "cpu":
        return x.sum(-1)
    K = x.shape[-1]
    bk = block_k(K)
    if bk != K:
        x = F.pad(x, (0, bk - K))
    return torch.from_numpy(np.sum(np.ascontiguousarray(x.numpy()), axis=-1))


def exp32(x: torch.Tensor) -> torch.Tensor:
    """float32 exp; on CPU numpy's (what ``tl.exp`` is under the Triton interpreter)."""
    if x.device.type != "cpu":
        return torch.exp(x)
    return torch.from_numpy(np.exp(np.ascontiguousarray(x.numpy())))


def seq_step(S, a, k, v, beta, delta: bool):
    """One sequential fp32 step, kernel op order.

    Args:
        S: float32 ``[n, HV, V, K]``; a: ``[n, HV, GK]`` (GK = 1 or K) decay factors;
        k: ``[n, HV, K]``; v: ``[n, HV, V]``; beta: ``[n, HV]`` (used when ``delta``).

    Returns:
        ``(S_new [n, HV, V, K], u [n, HV, V])``.
    """
    S = S * a.unsqueeze(-2)
    if delta:
        r = rowsum(S * k.unsqueeze(-2))
        u = beta.unsqueeze(-1) * (v - r)
    else:
        u = v
    S = S + u.unsqueeze(-1) * k.unsqueeze(-2)
    return S, u


def replay_ring(cache, S, slots, h: int):
    """Apply the first ``h`` ring entries of ``slots`` to ``S`` sequentially (recomputing u)."""
    for j in range(h):
        S, _ = seq_step(S, exp32(cache.ring_g[slots, :, j]), cache.ring_k[slots, :, j], cache.ring_v[slots, :, j],
                        cache.ring_beta[slots, :, j], cache.delta)
    return S


def flush_entries(L: int) -> int:
    """Entries of the chunked flush (the L inputs zero-padded): next power of two >= L, min 16."""
    return max(16, 1 << (int(L) - 1).bit_length())


def replay_flush_rows(cache) -> int:
    """Rows per flush sub-block of the replay kernel: the ``flush_block_v`` knob (default 16: with the
    launcher's 32-row, 4-warp tiles the kernel fits 128 registers on sm_90; 32-row sub-blocks need ~250), at most
    the (power-of-two) head and the ``block_v`` knob, at least 16 (tl.dot). On the GPU the launcher may
    split V further at small batches (its fp32 dots do not round like numpy's anyway)."""
    V = max(16, 1 << (int(cache.head_v) - 1).bit_length())
    rows = min(getattr(cache, "flush_block_v", None) or 16, V)
    if getattr(cache, "block_v", None):
        rows = min(rows, cache.block_v)
    return max(16, rows)


def _np(x: torch.Tensor, bk: int) -> np.ndarray:
    """float32 numpy copy of ``x [..., K]`` zero-padded to ``[..., bk]`` (C-contiguous)."""
    K = x.shape[-1]
    if bk != K:
        x = F.pad(x, (0, bk - K))
    return np.ascontiguousarray(x.detach().cpu().numpy().astype(np.float32))


def _npsum(x: np.ndarray) -> np.ndarray:
    """numpy sum over the last dim (what ``tl.sum`` over a row is under the interpreter)."""
    return np.sum(np.ascontiguousarray(x), axis=-1)


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fp32 matmul as ``tl.dot(a, b)`` under the interpreter (numpy matmul plus a zero accumulator)."""
    return np.matmul(a, b, dtype=np.float32) + np.float32(0.0)


def chunked_flush_state(cache, S0, slots, k, v, g, beta):
    """S_L after the L - 1 ring entries of ``slots`` and the current input, chunked form (kernel op order).

    With ``Gc_j`` the inclusive cumsum of the log decays over the L entries (d_{i+1:j} = exp(Gc_j - Gc_i)),
    ``Kd_j = k_j d_{1:j}``, ``Kd2_j = k_j d_{j+1:L}``:

    * delta rule: ``P = S0 Kd^T`` ([V, L], one pass over the state), ``M_ij = sum_k k_i k_j d_{i+1:j}``
      (i < j), ``T = (I + N)^{-1}`` with ``N = M diag(beta)`` strictly upper triangular on the 16 padded
      entries (nilpotent), computed as the product ``(I - N)(I + N^2)(I + N^4)...(I + N^(LP/2))`` (LP = 16:
      six fp32 dots, the kernel's order)
      and ``U = ((V - P) * beta) T``, i.e. ``u_j = beta_j (v_j - P_j - sum_{i<j} M_ij u_i)``
      (= beta_j (v_j - a_j S_{j-1} k_j): corrections recomputed from S0);
    * mamba2: ``u_j = v_j``;
    * ``S_L = S0 * d_{1:L} + U Kd2`` with ``U = [u_0 .. u_{L-1}]`` as columns ([V, L]).

    Entries are zero-padded to :func:`flush_entries`, keys to :func:`block_k` and rows to sub-blocks of
    :func:`replay_flush_rows` like the kernel (the fp32 products are numpy matmuls on the same shapes,
    which is what ``tl.dot`` is under the interpreter).

    Args:
        S0: float32 ``[n, HV, V, K]`` the decoded recurrence checkpoint; slots: int64 ``[n]``;
        k: ``[n, HV, K]``; v: ``[n, HV, V]``; g: ``[n, HV, GK]``; beta: ``[n, HV]``.

    Returns:
        float32 ``[n, HV, V, K]``.
    """
    L, K = cache.window, cache.head_k
    BK, LP = block_k(K), flush_entries(L)
    n, HV, V = v.shape
    dev = S0.device
    Kr = np.zeros((n, HV, LP, BK), np.float32)
    Kr[:, :, :L - 1] = _np(cache.ring_k[slots], BK)
    Kr[:, :, L - 1] = _np(k, BK)
    if cache.per_key:
        Gr = np.zeros((n, HV, LP, BK), np.float32)
        Gr[:, :, :L - 1] = _np(cache.ring_g[slots], BK)
        Gr[:, :, L - 1] = _np(g, BK)
        Gc = np.cumsum(Gr, axis=-2)
        gtot = np.ascontiguousarray(Gc[:, :, L - 1])                          # [n, HV, BK]
        Kd = Kr * np.exp(Gc)
        Kd2 = Kr * np.exp(gtot[:, :, None, :] - Gc)
        dL = np.exp(gtot)
    else:
        gr = np.zeros((n, HV, LP), np.float32)
        gr[:, :, :L - 1] = cache.ring_g[slots][..., 0].cpu().numpy()
        gr[:, :, L - 1] = g[..., 0].cpu().numpy()
        Gc = np.cumsum(gr, axis=-1)
        gtot = np.ascontiguousarray(Gc[:, :, L - 1])                          # [n, HV]
        Kd = Kr * np.exp(Gc)[..., None]
        Kd2 = Kr * np.exp(gtot[..., None] - Gc)[..., None]
        dL = np.exp(gtot[..., None] + np.zeros(BK, np.float32))
    Vr = np.zeros((n, HV, V, LP), np.float32)
    Vr[..., :L - 1] = np.swapaxes(cache.ring_v[slots].cpu().numpy(), -1, -2)
    Vr[..., L - 1] = v.cpu().numpy()
    # rows in sub-blocks of R (the kernel's flush tile; matmul rounding depends on the row count)
    R = replay_flush_rows(cache)
    nb = -(-V // R)
    S0n = np.zeros((n, HV, nb * R, BK), np.float32)
    S0n[:, :, :V] = _np(S0, BK)
    S0n = S0n.reshape(n, HV, nb, R, BK)
    Vp = np.zeros((n, HV, nb * R, LP), np.float32)
    Vp[:, :, :V] = Vr
    Vr = Vp.reshape(n, HV, nb, R, LP)
    if cache.delta:
        br = np.zeros((n, HV, LP), np.float32)
        br[:, :, :L - 1] = cache.ring_beta[slots].cpu().numpy()
        br[:, :, L - 1] = beta.cpu().numpy()
        upper = np.arange(LP)[:, None] < np.arange(LP)[None, :]
        if cache.per_key:
            M = np.zeros((n, HV, LP, LP), np.float32)
            for i in range(L):
                ki = Kr[:, :, i][:, :, None, :]
                e = np.exp(np.minimum(Gc - Gc[:, :, i][:, :, None, :], np.float32(0.0)))
                row = _npsum(Kr * e * ki)
                M[:, :, i, i + 1:] = row[:, :, i + 1:]
        else:
            Dm = np.exp(np.minimum(Gc[..., None, :] - Gc[..., :, None], np.float32(0.0)))
            M = np.where(upper, _dot(Kr, np.swapaxes(Kr, -1, -2)) * Dm, np.float32(0.0)).astype(np.float32)
        N = M * br[:, :, None, :]
        eye = np.eye(LP, dtype=np.float32)
        T, Np = eye - N, N
        for _ in range(LP.bit_length() - 2):        # Np = N^(2^s), s = 1 .. log2(LP) - 1
            Np = _dot(Np, Np)
            T = _dot(T, eye + Np)
        P = _dot(S0n, np.swapaxes(Kd, -1, -2)[:, :, None])                     # [n, HV, nb, R, LP]
        U = _dot((Vr - P) * br[:, :, None, None, :], T[:, :, None])
    else:
        U = Vr
    S = S0n * dL[:, :, None, None, :] + _dot(U, Kd2[:, :, None])
    S = S.reshape(n, HV, nb * R, BK)[:, :, :V]
    return torch.from_numpy(np.ascontiguousarray(S[..., :K])).to(dev)


def _flush(cache, slots, h, q, k, v, g, beta):
    a = exp32(g)
    S = cache.hp.decode(slots)
    if cache.window == 1:
        S, _ = seq_step(S, a, k, v, beta, cache.delta)
    else:
        S = chunked_flush_state(cache, S, slots, k, v, g, beta)
    o = rowsum(S * q.unsqueeze(-2))
    rb = None
    if cache.spec.sr:
        rb = sr_rbits(cache.seed, slots, cache.num_heads, cache.head_v, cache.head_k,
                      cache.flush_count[slots], cache.tag)
    cache.hp.encode(slots, S, rb)
    if not cache.spec.shared:
        cache.lp.encode(slots, S)
    return o


def _non_flush(cache, slots, h, q, k, v, g, beta):
    a = exp32(g)
    n, HV, V = v.shape
    gam = a
    acc_q = torch.zeros(n, HV, V, dtype=torch.float32, device=v.device)
    acc_k = torch.zeros_like(acc_q)
    ring_u = cache.ring_u if cache.delta else cache.ring_v
    for i in range(h):
        j = h - 1 - i
        kj = cache.ring_k[slots, :, j]
        uj = ring_u[slots, :, j]
        cq = rowsum(kj * gam * q)
        acc_q = acc_q + uj * cq.unsqueeze(-1)
        if cache.delta:
            ck = rowsum(kj * gam * k)
            acc_k = acc_k + uj * ck.unsqueeze(-1)
        gam = gam * exp32(cache.ring_g[slots, :, j])
    S = cache.lp.decode(slots)
    acc_q = acc_q + rowsum(S * (gam * q).unsqueeze(-2))
    if cache.delta:
        acc_k = acc_k + rowsum(S * (gam * k).unsqueeze(-2))
        u = beta.unsqueeze(-1) * (v - acc_k)
        cache.ring_u[slots, :, h] = u
    else:
        u = v
    o = acc_q + u * rowsum(k * q).unsqueeze(-1)
    cache.ring_g[slots, :, h] = g
    cache.ring_k[slots, :, h] = k
    cache.ring_v[slots, :, h] = v
    if cache.delta:
        cache.ring_beta[slots, :, h] = beta
    return o


def torch_step(cache, slot_idx, q, k, v, g, beta):
    """One decode step of every row (torch reference). Counters are updated by the caller.

    Args:
        cache: the SSMStateCache (tensors and config).
        slot_idx: int64 ``[B]`` (negative = padded row).
        q, k: float32 ``[B, HV, K]``; v: float32 ``[B, HV, V]``; g: float32 ``[B, HV, GK]``
            log decays (a = exp(g)); beta: float32 ``[B, HV]`` (a dummy for mamba2).

    Returns:
        float32 ``[B, HV, V]`` (zeros for padded rows).
    """
    B, HV, V = v.shape
    out = torch.zeros(B, HV, V, dtype=torch.float32, device=v.device)
    rows = torch.nonzero(slot_idx >= 0).flatten()
    if rows.numel() == 0:
        return out
    slots = slot_idx[rows]
    hs = cache.ring_count[slots]
    for h in torch.unique(hs).tolist():
        sel = rows[hs == h]
        s = slot_idx[sel]
        fn = _flush if h + 1 >= cache.window else _non_flush
        out[sel] = fn(cache, s, h, q[sel], k[sel], v[sel], g[sel], beta[sel])
    return out
