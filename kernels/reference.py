"""Torch references of the decode algorithms (conventional, Algorithm 1 replay, Algorithm 3 dual).

These operate on the tensors of a :class:`~replayssm_quant.kernels.state_cache.SSMStateCache`
with exactly the operation order of the Triton kernel (:mod:`.decode`), so the
stored checkpoints, ring entries (the cached corrections ``u_j`` included: a
shared spec's flush uses them) and counters are bit-identical between
``backend="torch"`` and ``backend="triton"`` under the Triton interpreter
(row sums use the same numpy reduction over a key dim zero-padded to the
kernel's power-of-two block, ring sums over the same zero-padded tiles).

Flush semantics (shared by the kernel; see also docs/KERNELS.md)
-----------------------------------------------------------------
A slot's ring holds the ``h < L`` inputs received since its last flush
(capacity ``L - 1``); for the decays it keeps the *cumulative* log decay since
the checkpoint, ``G_j = G_{j-1} + g_j`` (fp32, ``G_{-1} = 0``), so a step reads
the decay from entry ``j`` to now as ``exp(G_t - G_j)`` without a scan over
the ring (:func:`cumulative_log_decay`). A step with ``h + 1 < L`` is a
*non-flush* step: it reads the read copy ``S_lp``, computes the output from
``S_lp`` plus the ring plus the current input (DESIGN.md sec. 2 unrolled formula; for the delta rule the
current correction ``u_t`` uses ``S_{t-1} k_t`` from ``S_lp`` plus the ring),
and appends the current input as ring entry ``h``. A step with ``h + 1 == L`` is
the *flush* step: it reads the recurrence checkpoint ``S_hp`` and builds
``S_L`` from it, the ``L - 1`` ring entries and the current input in fp32
(chunked form, mathematically the sequential replay). For gdn/kda the
corrections ``u_j = beta_j (v_j - a_j S_{j-1} k_j)`` are, for a *shared* spec
(Algorithm 1: the read copy is ``S_hp``), the ``u_j`` cached in the ring by the
non-flush steps plus the current step's one; for a *separate* spec
(Algorithm 3) they are recomputed from ``S_hp`` and the ring's raw ``v_j``,
``beta_j`` (the cached ``u_j`` came from ``S_lp`` and only serve outputs).
It computes the output of the flush step from this fp32 state ``S_L``
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

from replayssm_quant.quant.reference import rowscaled_values

from .storage import nvfp4_parts, sr_rbits


def block_k(K: int) -> int:
    """The kernel's key-dim block: next power of two >= K (min 16)."""
    return max(16, 1 << (int(K) - 1).bit_length())


def nonflush_kc(BK: int) -> int:
    """Width of the key chunks of a non-flush step's read-copy reductions ``S (gamma q)``, ``S (gamma k)``:
    ``max(16, BK // 4)`` (1, 2 or 4 chunks, multiples of 16 for nvfp4 blocks). The kernels sum each chunk,
    then the chunk sums; the split launch streams the read copy chunk by chunk in that order."""
    return max(16, BK // 4)


def _chunked_npsum(x: np.ndarray) -> np.ndarray:
    """numpy sum over the last dim (``BK``) in the non-flush order of :func:`nonflush_kc`: per chunk, then over
    the chunk sums added in chunk order (what the kernels compute under the interpreter)."""
    BK = x.shape[-1]
    kc = nonflush_kc(BK)
    parts = np.sum(np.ascontiguousarray(x).reshape(*x.shape[:-1], BK // kc, kc), axis=-1)
    acc = np.zeros(parts.shape[:-1], np.float32)
    for c in range(BK // kc):            # the chunk sums in chunk order, as the kernels accumulate them
        acc = acc + parts[..., c]
    return acc


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


def cached_corrections(cache) -> bool:
    """Whether the flush uses the corrections ``u_j`` cached in the ring (Algorithm 1: delta rule, shared spec,
    so the read copy the ``u_j`` came from IS the recurrence checkpoint) instead of recomputing them from
    ``S_hp`` (Algorithm 3, separate specs). Such a ring keeps no raw ``v_j``/``beta_j``."""
    return bool(cache.delta and cache.spec.shared)


def cumulative_log_decay(G_prev: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The ring's decay entry of an input: ``G_t = G_prev + g_t`` in fp32, the log decay from the checkpoint
    through input t (``G_prev``: the previous entry's, 0 for the first input after a flush).

    Why cumulative: a step needs the decay from every live entry j to now, ``exp(G_t - G_j)``; with raw
    ``g_j`` in the ring that is a reverse cumsum over the ring, a scan over ``[L-1, K]`` per step for per-key decays
    (kda). The price: ``G_t - G_j`` carries
    the rounding of ``G`` (absolute ~ ``|G_t| 2^-24``) where a sum of the ``g_l`` after j would not."""
    return G_prev + g


def replay_ring(cache, S, slots, h: int):
    """Apply the first ``h`` ring entries of ``slots`` to ``S`` sequentially: shared delta-rule specs with the
    cached corrections ``u_j`` (as their flush does), otherwise recomputing ``u_j`` (mamba2: ``u = v``). The
    per-entry decays are the differences of the ring's cumulative log decays."""
    G_prev = torch.zeros_like(cache.ring_g[slots, :, 0])
    for j in range(h):
        G = cache.ring_g[slots, :, j]
        a = exp32(G - G_prev)
        G_prev = G
        kj = cache.value_head_keys(cache.ring_k[slots, :, j]).float()
        if cached_corrections(cache):
            S = S * a.unsqueeze(-2) + cache.ring_u[slots, :, j].unsqueeze(-1) * kj.unsqueeze(-2)
        else:
            bj = cache.ring_beta[slots, :, j] if cache.delta else None   # (mamba2's ring keeps no beta)
            S, _ = seq_step(S, a, kj, cache.ring_v[slots, :, j].float(), bj, cache.delta)
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
    knobs = cache.knobs
    rows = min(knobs.flush_block_v or 16, V)
    if knobs.block_v:
        rows = min(rows, knobs.block_v)
    return max(16, rows)


def _np(x: torch.Tensor, bk: int) -> np.ndarray:
    """float32 numpy copy of ``x [..., K]`` zero-padded to ``[..., bk]`` (C-contiguous)."""
    K = x.shape[-1]
    if bk != K:
        x = F.pad(x, (0, bk - K))
    return np.ascontiguousarray(x.detach().cpu().float().numpy())


def _npsum(x: np.ndarray) -> np.ndarray:
    """numpy sum over the last dim (what ``tl.sum`` over a row is under the interpreter)."""
    return np.sum(np.ascontiguousarray(x), axis=-1)


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fp32 matmul as ``tl.dot(a, b)`` under the interpreter (numpy matmul plus a zero accumulator)."""
    return np.matmul(a, b, dtype=np.float32) + np.float32(0.0)


def _flush_keys(cache, slots, k, g, BK: int, LP: int):
    """The flush's entries, zero-padded to ``LP`` and ``BK``: ring keys plus the current one ``Kr [n, HV, LP, BK]``,
    cumulative log decays ``Gc`` (``[n, HV, LP]``; kda ``[n, HV, LP, BK]``; padded entries repeat the last), and
    ``Kd = k_j d_{1:j}``, ``Kd2 = k_j d_{j+1:L}``, ``dL = d_{1:L}`` (``[n, HV, BK]``), float32 numpy."""
    L = cache.window
    n, HV = k.shape[:2]
    Kr = np.zeros((n, HV, LP, BK), np.float32)
    Kr[:, :, :L - 1] = _np(cache.value_head_keys(cache.ring_k[slots][:, :, :L - 1], dim=1), BK)
    Kr[:, :, L - 1] = _np(k, BK)
    if cache.per_key:
        Gc = np.zeros((n, HV, LP, BK), np.float32)
        Gc[:, :, :L - 1] = _np(cache.ring_g[slots][:, :, :L - 1], BK)
        gtot = Gc[:, :, L - 2] + _np(g, BK)                                     # [n, HV, BK]
        Gc[:, :, L - 1:] = gtot[:, :, None, :]
        Kd = Kr * np.exp(Gc)
        Kd2 = Kr * np.exp(gtot[:, :, None, :] - Gc)
        dL = np.exp(gtot)
    else:
        Gc = np.zeros((n, HV, LP), np.float32)
        Gc[:, :, :L - 1] = cache.ring_g[slots][:, :, :L - 1, 0].cpu().numpy()
        gtot = Gc[:, :, L - 2] + g[..., 0].cpu().numpy()                        # [n, HV]
        Gc[:, :, L - 1:] = gtot[..., None]
        Kd = Kr * np.exp(Gc)[..., None]
        Kd2 = Kr * np.exp(gtot[..., None] - Gc)[..., None]
        dL = np.exp(gtot[..., None] + np.zeros(BK, np.float32))
    return Kr, Gc, Kd, Kd2, dL


def _correction_solve(cache, slots, beta, Kr, Gc, LP: int):
    """Separate delta-rule spec: the betas ``br [n, HV, LP]`` and ``T = (I + M diag(br))^{-1} [n, HV, LP, LP]`` with
    ``M_ij = sum_k k_i k_j d_{i+1:j}`` (i < j), as the product ``(I - N)(I + N^2)...`` of the kernel's dots."""
    L = cache.window
    n, HV = Kr.shape[:2]
    br = np.zeros((n, HV, LP), np.float32)
    br[:, :, :L - 1] = cache.ring_beta[slots][:, :, :L - 1].cpu().numpy()
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
    return br, nilpotent_inverse(M * br[:, :, None, :])


def nilpotent_inverse(N: np.ndarray) -> np.ndarray:
    """``(I + N)^{-1}`` of strictly triangular ``N [..., P, P]`` (P a power of two, so ``N^P = 0``) as the kernels
    compute it: ``(I - N)(I + N^2)(I + N^4)...(I + N^(P/2))``, log2(P) - 1 squarings and as many products, fp32
    dots (:func:`_dot`)."""
    P = N.shape[-1]
    eye = np.eye(P, dtype=np.float32)
    T, Np = eye - N, N
    for _ in range(P.bit_length() - 2):         # Np = N^(2^s), s = 1 .. log2(P) - 1
        Np = _dot(Np, Np)
        T = _dot(T, eye + Np)
    return T


def chunked_flush_state(cache, S0, slots, k, v, g, beta):
    """S_L after the L - 1 ring entries of ``slots`` and the current input, chunked form (kernel op order).

    With ``Gc_j`` the cumulative log decays of the L entries (the ring's, then the current input's
    ``Gc_{L-1} = G_{L-2} + g_t``; padded entries repeat ``Gc_{L-1}``), d_{i+1:j} = exp(Gc_j - Gc_i),
    ``Kd_j = k_j d_{1:j}``, ``Kd2_j = k_j d_{j+1:L}``:

    * delta rule, shared spec (Algorithm 1, :func:`cached_corrections`): ``u_0 .. u_{L-2}`` = the ring's cached
      corrections (computed by the non-flush steps from this same checkpoint), ``u_{L-1} = beta (v - S0 kdl
      - sum_{j<L-1} u_j c_j)`` with ``kdl = k_{L-1} d_{1:L}`` and ``c_j = Kd2_j . k_{L-1}`` (= beta (v - S' k));
    * delta rule, separate spec: ``P = S0 Kd^T`` ([V, L], one pass over the state), ``M_ij = sum_k k_i k_j d_{i+1:j}``
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
    Kr, Gc, Kd, Kd2, dL = _flush_keys(cache, slots, k, g, BK, LP)
    # rows in sub-blocks of R (the kernel's flush tile; matmul rounding depends on the row count)
    R = replay_flush_rows(cache)
    nb = -(-V // R)
    S0n = np.zeros((n, HV, nb * R, BK), np.float32)
    S0n[:, :, :V] = _np(S0, BK)
    S0n = S0n.reshape(n, HV, nb, R, BK)
    cached = cached_corrections(cache)
    Vp = np.zeros((n, HV, nb * R, LP), np.float32)
    ring = cache.ring_u if cached else cache.ring_v
    Vp[:, :, :V, :L - 1] = np.swapaxes(ring[slots][:, :, :L - 1].float().cpu().numpy(), -1, -2)
    if not cached:
        Vp[:, :, :V, L - 1] = v.cpu().numpy()
    Vr = Vp.reshape(n, HV, nb, R, LP)
    if cached:
        # Algorithm 1 (shared spec): U = the cached corrections u_0 .. u_{L-2} (computed on the non-flush
        # steps from this same checkpoint) and the current one, u_{L-1} = beta (v - S' k) with
        # S' k = S0 (k d_{1:L}) + sum_{j<L-1} u_j (Kd2_j . k)  (Kd_{L-1} = k d_{1:L} = k * dL)
        kt = np.ascontiguousarray(Kr[:, :, L - 1])                              # [n, HV, BK]
        kdl = kt * dL
        c = np.where(np.arange(LP) < L - 1, _npsum(Kd2 * kt[:, :, None, :]), np.float32(0.0))   # [n, HV, LP]
        vf = np.zeros((n, HV, nb * R), np.float32)
        vf[:, :, :V] = v.cpu().numpy()
        vf = vf.reshape(n, HV, nb, R)
        acc = _npsum(S0n * kdl[:, :, None, None, :]) + _npsum(Vr * c[:, :, None, None, :])
        U = Vr.copy()
        U[..., L - 1] = beta.cpu().numpy()[:, :, None, None] * (vf - acc)
    elif cache.delta:
        br, T = _correction_solve(cache, slots, beta, Kr, Gc, LP)
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


def _pow2(n: np.ndarray) -> np.ndarray:
    """2**n as float32 from the exponent bits (int n in [-126, 127]), as ``rounding.pow2_f32``."""
    return ((np.asarray(n, np.int32) + 127) << 23).astype(np.int32).view(np.float32)


def _read_scale(x: np.ndarray, gmax: np.ndarray) -> np.ndarray:
    """``tiles._read_scale`` over the last dim of ``x [..., BK]`` (``gmax [...]`` the max decay): int32 ``[...]``,
    ``min(132 - e, 133 - e_gamma, 7)`` with the biased exponents of max |x| and of ``gmax``."""
    e = (np.max(np.abs(x), axis=-1).astype(np.float32).view(np.int32) >> 23) & 0xFF
    eg = (np.asarray(gmax, np.float32).view(np.int32) >> 23) & 0xFF
    return np.minimum(np.minimum(132 - e, 133 - eg), 7).astype(np.int32)


def _read_unscale(acc: np.ndarray, f, s: np.ndarray, shift: int) -> np.ndarray:
    """``tiles._read_unscale``: the scaled read's sums ``acc [..., V]`` times ``f`` (``1 / s_enc`` or the rows' d),
    then ``2**c 2**e`` with c + e = shift - s (``s [...]``)."""
    t = shift - s
    c = t >> 1
    return ((acc * f) * _pow2(c)[..., None]) * _pow2(t - c)[..., None]


def _read_dot(cache, slots, BK: int):
    """The non-flush reduction ``(gam [n, HV, BK], v [n, HV, BK]) -> sum_k S_lp[..., r, k] gam_k v_k``
    ``[n, HV, V]`` over the read copy of ``slots``, in the kernels' order (:func:`_chunked_npsum` chunks). nvfp4
    read copies as ``ring._read_rowdot``: with ``x' = (gam 2**s) v``, per chunk ``sum_b s_b sum_{k in b}
    (q_k 2**-6) x'_k``, the chunk sums added in order, then ``((acc / s_enc) 2**c) 2**d`` with c + d = 6 - s
    (``1 / s_enc`` rounded once): the exact values ``q s_b / s_enc`` enter the products, not their fp32
    roundings. Row-scaled (fp8, int8) read copies likewise: per chunk ``sum_k q_k x'_k`` (q the codes' values
    before the row scale d), the chunk sums added in order, then ``((acc d) 2**c) 2**e`` with c + e = -s."""
    lp = cache.lp
    if lp.fmt.row_scaled:
        q = _np(rowscaled_values(lp.data[slots], lp.fmt.name), BK)              # [n, HV, V, BK] exact
        d = lp.scales[slots].cpu().numpy()                                      # [n, HV, V]

        def dot_rows(gam, v):
            s = _read_scale(gam * v, np.max(gam, axis=-1))
            return _read_unscale(_chunked_npsum(q * ((gam * _pow2(s)[..., None]) * v)[:, :, None, :]), d, s, 0)
        return dot_rows
    if lp.fmt.name != "nvfp4":
        S = _np(lp.decode(slots), BK)                                           # [n, HV, V, BK]
        return lambda gam, v: _chunked_npsum(S * (gam * v)[:, :, None, :])
    q, s_b = nvfp4_parts(lp.data[slots], lp.scales[slots])
    raw = _np(q, BK) * np.float32(2.0 ** -6)                                    # [n, HV, V, BK] exact
    sbv = _np(s_b, BK // 16)                                                    # [n, HV, V, BK // 16]
    inv = (np.float32(1.0) / lp.s_enc[slots].cpu().numpy().astype(np.float32))[..., None]
    KC = nonflush_kc(BK)

    def dot(gam, v):
        s = _read_scale(gam * v, np.max(gam, axis=-1))
        prod = raw * ((gam * _pow2(s)[..., None]) * v)[:, :, None, :]
        acc = np.zeros(prod.shape[:-1], np.float32)
        for c in range(BK // KC):
            p = _npsum(prod[..., c * KC:(c + 1) * KC].reshape(*prod.shape[:-1], KC // 16, 16))
            acc = acc + _npsum(p * sbv[..., c * KC // 16:(c + 1) * KC // 16])
        return _read_unscale(acc, inv, s, 6)
    return dot


def _non_flush(cache, slots, h, q, k, v, g, beta):
    """Non-flush step in the kernel's exact fp32 op order (numpy, ring as zero-padded ``[L1P, .]`` tiles,
    decays ``exp(G_t - G_j)`` from the ring's cumulative log decays), so that the cached corrections ``u_j`` are
    bit-identical to the kernel's under the interpreter (shared delta-rule specs flush with them)."""
    n, HV, V = v.shape
    K = cache.head_k
    BK = block_k(K)
    L1 = cache.ring_k.shape[2]
    L1P = max(2, 1 << (L1 - 1).bit_length())
    qn, kn = _np(q, BK), _np(k, BK)                                             # [n, HV, BK]
    Kr = np.zeros((n, HV, L1P, BK), np.float32)
    Kr[:, :, :h] = _np(cache.value_head_keys(cache.ring_k[slots][:, :, :h], dim=1), BK)
    ring_u = cache.ring_u if cache.delta else cache.ring_v
    Ur = np.zeros((n, HV, L1P, V), np.float32)
    Ur[:, :, :h] = ring_u[slots][:, :, :h].float().cpu().numpy()
    # G_t = G_{h-1} + g_t (the new ring entry); the decay from entry j < h to now is exp(G_t - G_j)
    G_prev = cache.ring_g[slots][:, :, h - 1] if h > 0 else torch.zeros_like(g)
    Gt_entry = cumulative_log_decay(G_prev, g)                                  # [n, HV, GK]
    if cache.per_key:
        Gt = _np(Gt_entry, BK)                                                   # [n, HV, BK]
        Gr = np.zeros((n, HV, L1P, BK), np.float32)
        Gr[:, :, :h] = _np(cache.ring_g[slots][:, :, :h], BK)
        dec = np.exp(Gt[:, :, None, :] - Gr)
        cq = _npsum(Kr * dec * qn[:, :, None, :])
        ck = _npsum(Kr * dec * kn[:, :, None, :])
        gam = np.exp(Gt)
    else:
        Gts = np.ascontiguousarray(Gt_entry[..., 0].cpu().numpy())                # [n, HV]
        Gr = np.zeros((n, HV, L1P), np.float32)
        Gr[:, :, :h] = cache.ring_g[slots][:, :, :h, 0].cpu().numpy()
        dec = np.exp(Gts[..., None] - Gr)
        cq = _npsum(Kr * qn[:, :, None, :]) * dec
        ck = _npsum(Kr * kn[:, :, None, :]) * dec
        gam = np.exp(Gts)[..., None] + np.zeros(BK, np.float32)
    read_dot = _read_dot(cache, slots, BK)
    acc_q = np.sum(Ur * cq[..., None], axis=-2) + read_dot(gam, qn)
    vn = v.cpu().numpy()
    if cache.delta:
        acc_k = np.sum(Ur * ck[..., None], axis=-2) + read_dot(gam, kn)
        u = beta.cpu().numpy()[..., None] * (vn - acc_k)
        cache.ring_u[slots, :, h] = torch.from_numpy(np.ascontiguousarray(u)).to(v.device)
    else:
        u = vn
    o = acc_q + u * _npsum(kn * qn)[..., None]
    cache.ring_g[slots, :, h] = Gt_entry
    # (exact: ring_dtype is the activations' dtype); one key per key head: the first of its value heads' copies
    cache.ring_k[slots, :, h] = k[:, ::cache.key_group].to(cache.ring_k.dtype)
    if not cached_corrections(cache):    # raw v, beta: only the recompute (separate specs) and mamba2 need them
        cache.ring_v[slots, :, h] = v.to(cache.ring_v.dtype)
        if cache.delta:
            cache.ring_beta[slots, :, h] = beta
    return torch.from_numpy(np.ascontiguousarray(o)).to(v.device)


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
