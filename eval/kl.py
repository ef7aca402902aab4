"""The KL harness (DESIGN.md sec. 6).

For each batch of documents (``batch_docs`` at a time, fixed batches so a
resumed run processes exactly the same batches): prefill ``P`` tokens through
the model's own fp32 path, then teacher-force the next ``N`` tokens one by one
through the decode path with the fp32 reference and every variant side by side
in one :class:`~replayssm_quant.eval.decode.DecodeSession` (batch rows =
(variant, document) pairs). At decode position ``t`` (1-based: the output of
the ``t``-th decode step, the state has absorbed ``t`` tokens since prefill)::

    KL_t = sum_v p_fp32(v) (log p_fp32(v) - log p_spec(v))     (nats, full vocabulary)

(in float64 from the fp32 logits) and the teacher-forced NLL of the true next
token. Both accumulate on the device (no host sync inside the loop); each batch
ends with one copy to the host and one record per (document, variant) in the
:class:`ResultsStore`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from .data import Document
from .decode import DecodeSession, Variant, parse_variant
from .results import ResultsStore, doc_key, tokens_sha

REFERENCE = "fp32"


@dataclass
class KLSettings:
    prefill: int
    tokens: int
    window: int = 16
    seed: int = 0
    batch_docs: int = 8
    backend: str | None = None
    cuda_graphs: bool = True   # per-layer CUDA graphs of the SSM step (GPU, triton backend)


def batch_seed(seed: int, batch: int) -> int:
    """The stochastic-rounding seed of document batch ``batch`` (independent streams per batch)."""
    return (int(seed) * 1_000_003 + 7919 * int(batch)) % (2 ** 31 - 1)


def with_reference(variants: list[Variant]) -> list[Variant]:
    """``variants`` with the fp32 replay reference first (added if missing, duplicates dropped)."""
    ref = parse_variant(REFERENCE)
    out = [ref]
    for v in variants:
        if v.label not in [o.label for o in out]:
            out.append(v)
    return out


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def kl_batch(model, tokens: torch.Tensor, variants: list[Variant], st: KLSettings, seed: int,
             progress=None) -> tuple[np.ndarray, np.ndarray, float]:
    """Teacher-forced KL of one batch of documents.

    Args:
        tokens: int64 ``[D, P + N + 1]``.
        variants: reference first (``variants[0]`` must be the fp32 reference).
        progress: optional tqdm bar advanced once per decode step.

    Returns:
        ``(kl float32 [n, D, N], nll float32 [n, D, N], decode seconds)``; ``kl[0]`` is 0 (reference).
    """
    if not variants[0].is_reference or variants[0].mode != "replay":
        raise ValueError("the first variant of a KL batch must be the fp32 replay reference")
    P, N = st.prefill, st.tokens
    D, n = tokens.shape[0], len(variants)
    if tokens.shape[1] < P + N + 1:
        raise ValueError(f"documents need {P + N + 1} tokens, got {tokens.shape[1]}")
    with DecodeSession(model, variants, window=st.window, seed=seed, backend=st.backend,
                       cuda_graphs=st.cuda_graphs) as s:
        logits = s.prefill(tokens[:, :P])
        dev = logits.device                       # the lm_head's device (differs from the input's with device_map)
        toks_in = tokens.to(model.get_input_embeddings().weight.device)
        toks = tokens.to(dev)
        kl = torch.zeros(n, D, N, device=dev, dtype=torch.float64)
        nll = torch.zeros(n, D, N, device=dev, dtype=torch.float64)
        _sync(dev)
        t0 = time.perf_counter()
        for t in range(N):
            logits = s.step(toks_in[:, P + t])                    # [n*D, vocab]
            # float64 for the divergence: with fp32 the cancellation in sum p (log p - log q) leaves
            # noise of ~1e-8 nats (negative KLs) that would swamp the small KLs of 16-bit states
            lp = torch.log_softmax(logits.double(), -1).view(n, D, -1)
            ref = lp[0]
            kl[:, :, t] = (ref.exp()[None] * (ref[None] - lp)).sum(-1)
            nll[:, :, t] = -lp.gather(2, toks[:, P + t + 1].view(1, D, 1).expand(n, D, 1))[..., 0]
            if progress is not None:
                progress.update(1)
        _sync(dev)
        secs = time.perf_counter() - t0
    return kl.float().cpu().numpy(), nll.float().cpu().numpy(), secs


def run_kl(model, docs: list[Document], variants: list[Variant], st: KLSettings, store: ResultsStore,
           progress: bool = True, stop_after_batches: int | None = None) -> dict:
    """Run every missing (document, variant) record into ``store``.

    Documents go in fixed batches ``[b * batch_docs, (b + 1) * batch_docs)``; a batch reruns the
    reference plus the variants it still lacks. ``stop_after_batches`` stops early (for tests of
    interruption). Returns a summary dict (batches run, records written, tokens/s).
    """
    from tqdm.auto import tqdm

    variants = with_reference(variants)
    B = st.batch_docs
    nb = (len(docs) + B - 1) // B
    plan = []
    for b in range(nb):
        idx = list(range(b * B, min((b + 1) * B, len(docs))))
        todo = [v for v in variants if not all(store.done(i, v.slug) for i in idx)]
        if todo:
            plan.append((b, idx, [variants[0]] + [v for v in todo if v.label != variants[0].label]))
    total_steps = len(plan) * st.tokens
    bar = tqdm(total=total_steps, desc="KL decode steps", unit="step", disable=not progress or not plan)
    written, tok_total, secs_total = 0, 0, 0.0
    for k, (b, idx, vs) in enumerate(plan):
        if stop_after_batches is not None and k >= stop_after_batches:
            break
        bar.set_postfix_str(f"batch {b + 1}/{nb}, {len(vs)} variants x {len(idx)} docs")
        tokens = torch.stack([docs[i].tokens[:st.prefill + st.tokens + 1] for i in idx])
        kl, nll, secs = kl_batch(model, tokens, vs, st, batch_seed(st.seed, b), progress=bar)
        for j, v in enumerate(vs):
            for d, i in enumerate(idx):
                if store.done(i, v.slug):
                    continue
                meta = {"doc": doc_key(i), "doc_id": docs[i].doc_id,
                        "tokens_sha": tokens_sha(docs[i].tokens), "variant": v.label, "spec": v.spec.text,
                        "mode": v.mode, "batch": b, "prefill": st.prefill, "tokens": st.tokens,
                        "mean_kl": float(kl[j, d].mean()), "mean_nll": float(nll[j, d].mean())}
                store.write_record(i, v.slug, meta, kl[j, d], nll[j, d])
                written += 1
        rows = len(vs) * len(idx)
        store.write_batch(b, {"batch": b, "docs": len(idx), "variants": [v.label for v in vs], "rows": rows,
                              "decode_steps": st.tokens, "decode_seconds": secs,
                              "row_tokens_per_s": rows * st.tokens / secs if secs > 0 else None,
                              "device": str(model.get_input_embeddings().weight.device)})
        tok_total += rows * st.tokens
        secs_total += secs
    bar.close()
    return {"batches": len(plan), "records_written": written,
            "row_tokens_per_s": tok_total / secs_total if secs_total > 0 else None}
