"""Mamba-2 chunked SSD in einsum (matmul) form.

Drop-in for transformers' Nemotron-H ``mamba2_chunk_scan`` torch fallback, which forms
``[B, chunks, C, C, heads, dstate]`` broadcast products; this one contracts with einsum
(the "minimal SSD" formulation of the Mamba-2 paper) and is used for training only.
Math per head (A < 0): ``dt = clamp(softplus(dt + dt_bias))``, ``x~ = dt x``, ``a = dt A``,
``S_t = exp(a_t) S_{t-1} + x~_t B_t^T``, ``y_t = S_t C_t + D x_t``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def segsum_exp(a: torch.Tensor) -> torch.Tensor:
    """exp(sum_{k=j+1..i} a_k) for j <= i else 0, over the last dim: [..., L] -> [..., L, L].

    The sums are formed by a masked cumulative sum (not as differences of prefix sums), so
    long, strongly decaying chunks lose no precision.
    """
    L = a.shape[-1]
    x = a.unsqueeze(-1).expand(*a.shape, L)                       # x[..., k, j] = a_k
    strict = torch.ones(L, L, dtype=torch.bool, device=a.device).tril(-1)
    x = x.masked_fill(~strict, 0.0)
    ss = x.cumsum(-2)                                             # ss[..., i, j] = sum_{j<k<=i} a_k
    incl = torch.ones(L, L, dtype=torch.bool, device=a.device).tril()
    return ss.masked_fill(~incl, float("-inf")).exp()


def discretized_dt(dt, dt_bias=None, dt_softplus: bool = False, dt_limit=(0.0, float("inf"))) -> torch.Tensor:
    """Mamba-2's step size ``clamp(softplus(dt + dt_bias))`` in float32, shape of ``dt`` ([b, l, h])."""
    dt = dt.float()
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if dt_softplus:
        dt = F.softplus(dt)
    return dt.clamp(min=dt_limit[0], max=dt_limit[1])


def mamba2_chunk_scan(hidden_states, dt, A, B, C, chunk_size: int, D=None, dt_bias=None, initial_states=None,
                      dt_softplus: bool = False, dt_limit=(0.0, float("inf")), return_final_states: bool = False,
                      **kwargs):
    """SSD over a whole sequence.

    hidden_states: [b, l, h, p]; dt: [b, l, h]; A: [h]; B, C: [b, l, g, n]; D: [h] or None;
    initial_states: [b, h, p, n] or None. Returns y float32 [b, l, h, p] (and the final state
    float32 [b, h, p, n] if return_final_states).
    """
    with torch.autocast(device_type=hidden_states.device.type, enabled=False):
        bsz, seqlen, h, p = hidden_states.shape
        g = B.shape[2]
        dt = discretized_dt(dt, dt_bias, dt_softplus, dt_limit)
        x = hidden_states.float()
        Bh = B.float().repeat_interleave(h // g, dim=2)
        Ch = C.float().repeat_interleave(h // g, dim=2)
        xd = x * dt.unsqueeze(-1)
        a = A.float() * dt                                          # [b, l, h]
        L = chunk_size
        pad = (L - seqlen % L) % L
        if pad:
            xd = F.pad(xd, (0, 0, 0, 0, 0, pad))
            Bh = F.pad(Bh, (0, 0, 0, 0, 0, pad))
            Ch = F.pad(Ch, (0, 0, 0, 0, 0, pad))
            a = F.pad(a, (0, 0, 0, pad))
        nc = (seqlen + pad) // L
        xd = xd.reshape(bsz, nc, L, h, p)
        Bh = Bh.reshape(bsz, nc, L, h, -1)
        Ch = Ch.reshape(bsz, nc, L, h, -1)
        a = a.reshape(bsz, nc, L, h).permute(0, 3, 1, 2)            # [b, h, c, L]
        acs = a.cumsum(-1)

        # 1. intra-chunk (diagonal blocks)
        Lm = segsum_exp(a)                                         # [b, h, c, L, L]
        scores = torch.einsum("bclhn,bcshn->bhcls", Ch, Bh) * Lm
        y = torch.einsum("bhcls,bcshp->bclhp", scores, xd)
        # 2. state at the end of each chunk from that chunk's inputs
        decay_states = (acs[..., -1:] - acs).exp()                  # [b, h, c, L]
        states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bh, decay_states, xd)
        # 3. inter-chunk recurrence
        if initial_states is None:
            init = torch.zeros_like(states[:, :1])
        else:
            init = initial_states.float().unsqueeze(1)
        states = torch.cat([init, states], dim=1)                   # [b, c+1, h, p, n]
        decay_chunk = segsum_exp(F.pad(acs[..., -1], (1, 0)))      # [b, h, c+1, c+1]
        new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
        states, final_state = new_states[:, :-1], new_states[:, -1]
        # 4. state -> output
        y = y + torch.einsum("bclhn,bchpn,bhcl->bclhp", Ch, states, acs.exp())
        y = y.reshape(bsz, nc * L, h, p)[:, :seqlen]
        if D is not None:
            y = y + x * D.float()[:, None]
    if return_final_states:
        return y, final_state
    return y
