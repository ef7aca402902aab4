"""Chunked Gated DeltaNet in matmul form (WY / UT transform + a parallel scan over chunks).

Drop-in for transformers' ``torch_chunk_gated_delta_rule`` (same arguments and returns), used to
train the GDN model fast; the saved model does not depend on it. Math (HF state layout
``S [K, V]``, ``o_t = S_t^T q_t``), per chunk of C tokens with in-chunk cumulative log decay
``c_t`` and ``G_t = exp(c_t)``:

* ``A[t, j] = beta_t (k_t . k_j) G_t / G_j`` for j < t (strictly lower), ``T = (I + A)^-1``
  (one batched triangular solve for all chunks);
* ``W_v = T (beta V)``, ``W_k = T (beta G K)``; with the state S before the chunk the corrections
  are ``U = W_v - W_k S``;
* output ``O = (G Q) S + (Q K^T * D) U`` with ``D[t, j] = G_t / G_j`` for j <= t;
* next state ``S' = G_C S + (K G_C / G)^T U = M S + b`` with ``M = G_C I - (K G_C/G)^T W_k``,
  ``b = (K G_C/G)^T W_v``: an affine recurrence over chunks, solved by a log-depth
  (Hillis-Steele) scan of K x K matrices, so there is no Python loop over chunks.

Everything runs in fp32 with autocast off.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .fast_ssd import segsum_exp


def _l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _affine_scan(M: torch.Tensor, b: torch.Tensor):
    """Inclusive scan of x_n = M_n x_{n-1} + b_n over dim 2.

    M: float32 [B, H, N, K, K]; b: float32 [B, H, N, K, V]. Returns (P, c) with the same shapes,
    where x_n = P_n x_0 + c_n for x_0 the state before the first element.
    """
    n = M.shape[2]
    d = 1
    while d < n:
        # combine element i with element i - d: (M_i, b_i) o (M_{i-d}, b_{i-d})
        M_prev = M[:, :, :-d]
        b_prev = b[:, :, :-d]
        M_cur = M[:, :, d:]
        b_cur = b[:, :, d:]
        M_new = M_cur @ M_prev
        b_new = M_cur @ b_prev + b_cur
        M = torch.cat([M[:, :, :d], M_new], dim=2)
        b = torch.cat([b[:, :, :d], b_new], dim=2)
        d *= 2
    return M, b


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size: int = 64, initial_state=None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           cu_seqlens=None, **kwargs):
    """Gated delta rule over a whole sequence, chunked, in matmul form.

    query, key: [B, T, HV, K] (already expanded to the value heads); value: [B, T, HV, V];
    g (log decay, <= 0), beta: [B, T, HV]; initial_state: [B, HV, K, V] or None.
    Returns (output [B, T, HV, V] in query's dtype, final state float32 [B, HV, K, V] or None).
    """
    if cu_seqlens is not None:
        raise ValueError("fast chunk_gated_delta_rule: packed sequences (cu_seqlens) are not supported")
    out_dtype = query.dtype
    with torch.autocast(device_type=query.device.type, enabled=False):
        q, k, v, b, gg = [x.transpose(1, 2).float() for x in (query, key, value, beta, g)]
        if use_qk_l2norm_in_kernel:
            q, k = _l2norm(q), _l2norm(k)
        Bsz, H, T, K = k.shape
        V = v.shape[-1]
        q = q * K ** -0.5
        C = chunk_size
        pad = (C - T % C) % C
        if pad:
            q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
            b, gg = (F.pad(x, (0, pad)) for x in (b, gg))
        N = (T + pad) // C
        q, k, v = (x.reshape(Bsz, H, N, C, x.shape[-1]) for x in (q, k, v))
        b, gg = b.reshape(Bsz, H, N, C), gg.reshape(Bsz, H, N, C)

        c = gg.cumsum(-1)                                          # [B,H,N,C]
        Dm = segsum_exp(gg)                                        # [B,H,N,C,C]: G_t / G_j, j <= t
        kk = k @ k.transpose(-1, -2)
        A = (b.unsqueeze(-1) * kk * Dm).tril(-1)
        eye = torch.eye(C, dtype=q.dtype, device=q.device)
        G = c.exp().unsqueeze(-1)                                  # [B,H,N,C,1]
        rhs = torch.cat([v * b.unsqueeze(-1), k * (b.unsqueeze(-1) * G)], dim=-1)
        W = torch.linalg.solve_triangular(A + eye, rhs, upper=False, unitriangular=True)
        Wv, Wk = W[..., :V], W[..., V:]                            # [B,H,N,C,V], [B,H,N,C,K]

        gC = c[..., -1:]                                           # [B,H,N,1]
        kd = k * (gC - c).exp().unsqueeze(-1)                      # K * G_C / G
        eyeK = torch.eye(K, dtype=q.dtype, device=q.device)
        Mn = gC.exp().unsqueeze(-1) * eyeK - kd.transpose(-1, -2) @ Wk   # [B,H,N,K,K]
        bn = kd.transpose(-1, -2) @ Wv                                    # [B,H,N,K,V]
        P, cst = _affine_scan(Mn, bn)
        if initial_state is None:
            S_after = cst
            S0 = torch.zeros(Bsz, H, 1, K, V, dtype=q.dtype, device=q.device)
        else:
            S0 = initial_state.float().unsqueeze(2)
            S_after = P @ S0 + cst
        S_before = torch.cat([S0, S_after[:, :, :-1]], dim=2)      # [B,H,N,K,V]

        U = Wv - Wk @ S_before
        O = (q * G) @ S_before + ((q @ k.transpose(-1, -2)) * Dm) @ U
        O = O.reshape(Bsz, H, N * C, V)[:, :, :T].transpose(1, 2).contiguous().to(out_dtype)
        final = S_after[:, :, -1] if output_final_state else None
    return O, final
