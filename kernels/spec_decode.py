"""Speculative verification and commit on an :class:`~.state_cache.SSMStateCache` (DESIGN.md sec. 3, Algorithm 2).

The cache's public ``verify`` / ``commit`` validate their arguments and call :func:`verify` / :func:`commit`
here. ``backend="torch"`` runs the sequence below in torch (the references of :mod:`.spec_reference` and
:mod:`.reference`; host synchronisations allowed); ``"triton"`` runs the same sequence as kernels
(:func:`.verify.triton_verify`, :func:`.verify.triton_commit`, :func:`.verify.triton_restore`: no host
synchronisation, CUDA-graph capturable), bit-identical under the interpreter.

Replay (ring capacity ``C = L - 1 + T_max``; a slot's committed count ``h`` is always ``<= L - 1``):

* ``verify`` (``T`` tokens): outputs from the read copy + the ``h`` committed entries + the window's own entries
  (:func:`.spec_reference.verify_rows`), the ``T`` entries written to ring positions ``h .. h + T - 1`` (they fit:
  ``h + T <= C``), the raw log decays (shared delta-rule specs: also the raw v, beta) to the draft buffers. The
  committed count does not move; ``draft_count[slot] = T``.
* ``commit`` (``a`` accepted, ``1 <= a <= T``): ``h' = h + a``. If ``h' < L`` the count becomes ``h'`` (the
  rejected entries past it are overwritten later). If ``h' >= L`` the slot flushes **the same L tokens a plain
  decode would**, at the commit that reaches the L-th one: ring entries ``0 .. L - 2`` plus entry ``L - 1`` as the
  flush step's input (the existing flush of :func:`.reference.torch_step` / :func:`.decode.triton_step`, with its
  casts, Philox counters and flush counter increment), then the committed tail (``h' - L <= T_max - 1``
  tokens of the last verify window) is verified again from the new read copy into ring positions ``0 ..
  h' - L - 1`` (outputs dropped): a copy of at most ``T_max - 1`` entries, with the corrections and cumulative
  log decays that the non-flush steps after a flush would have written. So the flush schedule is plain
  stepping's (one flush per ``L`` committed tokens, same counters) and a separate spec's (and every mamba2)
  checkpoint is bit-identical to a step-by-step run's; shared delta-rule specs differ from it by the fp32
  reassociation of the cached corrections (the verify's solve vs the step's row sums).
  Requires ``T_max <= L`` (the tail then fits the step path's ring).

Conventional (``mode="conventional"``, the snapshot baseline): ``verify`` writes one rounded snapshot per token
(:func:`.spec_reference.conventional_verify_rows`), ``commit`` copies snapshot ``a - 1`` into the checkpoint and
adds ``a`` to the flush counter: exactly ``a`` conventional steps, bit for bit.
"""

from __future__ import annotations

import torch

from .reference import cached_corrections, torch_step
from .spec_reference import conventional_verify_rows, verify_rows


# ------------------------------------------------------------------------------------------- helpers
def _eff(cache, slots):
    """Slot indices with padded rows (negative) mapped to the counters' scratch entry ``S``."""
    return torch.where(slots >= 0, slots, torch.full_like(slots, cache.num_slots))


def _clamped(cache, slots):
    """Slot indices with padded rows mapped to slot 0 (for gathers whose values padded rows never use)."""
    return slots.clamp(min=0, max=cache.num_slots - 1)


def _torch_verify(cache, slots, q, k, v, g, beta, counts, write_draft, out):
    """The torch reference over rows grouped by (ring count, token count) (host syncs: a reference)."""
    B, T, HV, V = v.shape
    out.zero_()
    rows = torch.nonzero((slots >= 0) & (counts > 0)).flatten()
    if rows.numel() == 0:
        return out
    s = slots[rows]
    key = cache.ring_count[s].to(torch.int64) * (T + 1) + counts[rows].to(torch.int64)
    for kv in torch.unique(key).tolist():
        sel = rows[key == kv]
        h, nt = divmod(int(kv), T + 1)
        o = verify_rows(cache, slots[sel], h, nt, q[sel], k[sel], v[sel], g[sel], beta[sel], write_draft)
        out[sel, :nt] = o[:, :nt]
    return out


# ------------------------------------------------------------------------------------------- verify
def verify(cache, slots, q, k, v, g, beta, out):
    """Verify ``T`` tokens per row (inputs validated; module doc). ``slots`` int64 ``[B]``; ``q [B, T, HV, K]``,
    ``k [B, T, HK, K]`` (per key head, ``HK = cache.num_key_heads``); ``g`` ``[B, T, HV, GK]``; ``beta`` ``[B, T,
    HV]`` (zeros for mamba2); ``out`` float32 ``[B, T, HV, V]``. Returns ``out``."""
    B, T = q.shape[:2]
    if cache.backend == "triton":   # one launch (the kernels also set the pending verify count)
        from .verify import triton_conventional_verify, triton_verify
        if cache.mode == "conventional":
            return triton_conventional_verify(cache, slots, q, k, v, g, beta, out)
        return triton_verify(cache, slots, q, k, v, g, beta, None, True, out)
    k = cache.value_head_keys(k)    # the references take a key per value head
    if cache.mode == "conventional":
        out.zero_()
        rows = torch.nonzero(slots >= 0).flatten()
        if rows.numel():
            f = lambda x: x[rows].float()   # noqa: E731
            out[rows] = conventional_verify_rows(cache, slots[rows], f(q), f(k), f(v), f(g), f(beta))
    else:
        counts = torch.full((B,), T, dtype=torch.int32, device=q.device)
        _torch_verify(cache, slots, q.float(), k.float(), v.float(), g.float(), beta.float(), counts, True, out)
    cache.draft_count[_eff(cache, slots)] = torch.where(slots >= 0, T, 0).to(torch.int32)
    return out


# ------------------------------------------------------------------------------------------- commit
def _restore_snapshots(cache, slots, accepted):
    """Conventional commit (torch): checkpoint <- snapshot ``accepted - 1`` of each row's slot; flush counter +
    accepted (the Triton path: :func:`.verify.triton_restore`)."""
    eff = _eff(cache, slots)
    rows = torch.nonzero(slots >= 0).flatten()
    s = slots[rows]
    src = s * cache.max_draft + accepted[rows].to(torch.int64) - 1
    for dst_t, src_t in zip(cache.hp.kernel_tensors(), cache.snap.kernel_tensors()):
        if dst_t is not None:
            dst_t[s] = src_t[src]
    cache.flush_count[eff] = cache.flush_count[eff] + torch.where(slots >= 0, accepted, 0).to(torch.int32)
    cache.draft_count[eff] = 0


def _flush_inputs(cache, slots, h):
    """The flush step's input of each row: ring entry ``L - 1`` (token ``L - 1 - h`` of the last verify window),
    ``(k [B, HV, K], v [B, HV, V], g [B, HV(, K)], beta [B, HV])``, the raw inputs from the ring or the draft
    buffers (k per value head, as the torch step takes it)."""
    L, Tm = cache.window, cache.max_draft
    c = _clamped(cache, slots)
    j = (L - 1 - h).clamp(0, Tm - 1).to(torch.int64)
    heads = torch.arange(cache.num_heads, device=slots.device)
    ci, ji = c[:, None], j[:, None]
    k = cache.value_head_keys(cache.ring_k[c, :, L - 1])
    g = cache.draft_g[ci, heads, ji]                                   # [B, HV, GK]
    if not cache.per_key:
        g = g[..., 0]
    if cached_corrections(cache):
        v, beta = cache.draft_v[ci, heads, ji], cache.draft_beta[ci, heads, ji]
    else:
        v = cache.ring_v[c, :, L - 1]
        beta = cache.ring_beta[c, :, L - 1] if cache.delta else None
    return k, v, g, beta


def _tail_inputs(cache, slots, h):
    """The committed tail after a flush: tokens ``L - h + i`` of the last verify window (ring positions ``L + i``),
    ``i < T_max - 1``, as verify inputs ``k [B, T_max - 1, HV, K]`` (per value head, as the torch verify takes
    it), ``v``, ``g [B, T_max - 1, HV, GK]``, beta."""
    L, Tm = cache.window, cache.max_draft
    c = _clamped(cache, slots)[:, None]
    i = torch.arange(Tm - 1, device=slots.device)
    pos = L + i[None, :]                                               # [1, Tm - 1] ring positions
    j = ((L - h)[:, None] + i[None, :]).clamp(0, Tm - 1).to(torch.int64)   # [B, Tm - 1] token indices
    k = cache.value_head_keys(cache.ring_k[c, :, pos])                 # [B, Tm - 1, HV, K]
    g = cache.draft_g.transpose(1, 2)[c, j]                            # [B, Tm - 1, HV, GK]
    if cached_corrections(cache):
        v, beta = cache.draft_v.transpose(1, 2)[c, j], cache.draft_beta.transpose(1, 2)[c, j]
    else:
        v = cache.ring_v[c, :, pos]
        beta = cache.ring_beta[c, :, pos] if cache.delta else torch.zeros(*k.shape[:3], device=k.device)
    return k, v, g, beta


def _flush_step(cache, idx, k, v, g, beta):
    """The flush of the rows with ``idx >= 0`` (their ring counts set to ``L - 1``): one torch decode step on the
    flush inputs; the output is dropped, the counters are the caller's."""
    B, HV, V = v.shape
    if not bool((idx >= 0).any()):
        return
    gg = g.float() if cache.per_key else g.float().unsqueeze(-1)
    bb = beta.float() if beta is not None else torch.zeros(B, HV, device=v.device)
    torch_step(cache, idx, torch.zeros_like(k).float(), k.float(), v.float(), gg, bb)


def commit(cache, slots, accepted):
    """Commit ``accepted`` (int32 ``[B]``, 1..T of the last verify) tokens per row (validated; module doc). The
    Triton path is the same sequence in a few launches (:func:`.verify.triton_commit`, :func:`.verify.triton_restore`);
    this is its torch reference."""
    if cache.backend == "triton":
        from .verify import triton_commit, triton_restore
        (triton_restore if cache.mode == "conventional" else triton_commit)(cache, slots, accepted)
        return
    if cache.mode == "conventional":
        _restore_snapshots(cache, slots, accepted)
        return
    eff = _eff(cache, slots)
    valid = slots >= 0
    L = cache.window
    h = cache.ring_count[eff]
    hn = h + torch.where(valid, accepted, 0).to(torch.int32)
    flush = valid & (hn >= L)
    # 1) the flush of the rows whose commit reaches the window's L-th token: ring entries 0 .. L-2 + entry L-1
    k, v, g, beta = _flush_inputs(cache, slots, h)
    tail_in = _tail_inputs(cache, slots, h) if cache.max_draft > 1 else None   # (read before anything is written)
    cache.ring_count[eff] = torch.where(flush, L - 1, h).to(torch.int32)
    _flush_step(cache, torch.where(flush, slots, -1), k, v, g, beta)
    cache.flush_count[eff] = cache.flush_count[eff] + flush.to(torch.int32)
    # 2) the committed tail: verified again from the new read copy into ring positions 0 .. h' - L - 1
    tail = torch.where(flush, hn - L, 0).to(torch.int32)
    cache.ring_count[eff] = torch.where(flush, 0, hn).to(torch.int32)
    if tail_in is not None:
        tk, tv, tg, tb = tail_in
        n, Tm1, HV = tk.shape[:3]
        tq = torch.zeros_like(tk)
        out = torch.empty(n, Tm1, HV, cache.head_v, dtype=torch.float32, device=tk.device)
        _torch_verify(cache, torch.where(tail > 0, slots, -1), tq, tk.float(), tv.float(), tg, tb, tail, False, out)
    cache.ring_count[eff] = torch.where(flush, tail, hn).to(torch.int32)
    cache.draft_count[eff] = 0
