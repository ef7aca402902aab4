"""The KL harness (DESIGN.md sec. 6).

For each batch of documents (``batch_docs`` at a time, fixed batches so a
resumed run processes exactly the same batches): prefill ``P`` tokens through
the model's own path (the SSM states come out in fp32), then teacher-force the
next ``N`` tokens through the decode path with the fp32 reference and every
variant side by side in one :class:`~replayssm_quant.eval.decode.DecodeSession`
(batch rows = (variant, document) pairs). At decode position ``t`` (1-based: the
output of the ``t``-th decode step, the state has absorbed ``t`` tokens since prefill)::

    KL_t = sum_v p_fp32(v) (log p_fp32(v) - log p_spec(v))     (nats, full vocabulary)

(in float64 from the fp32 logits), the teacher-forced NLL of the true next
token, whether the top-1 token is the reference's and the change in the true
token's probability (:func:`~replayssm_quant.eval.kl_stats.position_metrics`).
They accumulate on the device (no host sync inside the loop); each batch ends
with one copy to the host and one record per (document, variant) in the
:class:`ResultsStore`.

Execution (``KLSettings.exec_mode``): ``chunked-all`` (default) runs every variant
L tokens per model forward in one session: replay variants through the chunked
windows (DESIGN.md sec. 3, the same roundings and Philox counters as
step-by-step decoding), conventional variants stepping their state token by
token inside each SSM layer (the step path's own ``cache.step`` calls; only the
model's other layers see L tokens per forward). ``chunked`` feeds only the
replay variants that way; conventional variants then run in a second session
on the step path, beside their own copy of the reference (on a GPU that step
session bounds the run's time: reports/kl/scale). ``step`` runs everything one
token per forward (what measures the decode kernels themselves).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from .data import Document
from .decode import DecodeSession, Variant, check_exec_mode, chunkable, parse_variant
from .kl_stats import METRICS, position_metrics
from .peak_memory import PhaseMemory
from .placement import input_device
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
    cuda_graphs: bool = True   # per-layer CUDA graphs of the SSM step and chunked windows (GPU, triton backend)
    exec_mode: str = "chunked-all"  # "chunked-all": every variant L tokens per forward; "chunked": replay
    #                                 variants only; "step": one token per forward (eval.decode.EXEC_MODES)

    def __post_init__(self):
        check_exec_mode(self.exec_mode)


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


def exec_groups(variants: list[Variant], exec_mode: str) -> list[tuple[str, list[int]]]:
    """How a batch runs its variants (``variants[0]`` the reference): ``[(exec_mode, variant indices)]``, each
    group led by the reference (index 0). ``step``, ``chunked-all``: one group. ``chunked``: the reference and the replay
    variants chunked, then the reference and the conventional variants on the step path (if any); with only
    conventional variants, one step group."""
    if exec_mode in ("step", "chunked-all"):
        return [(exec_mode, list(range(len(variants))))]
    chunk = [i for i, v in enumerate(variants) if i and chunkable(v)]
    step = [i for i, v in enumerate(variants) if i and not chunkable(v)]
    groups = [("chunked", [0] + chunk)] if chunk or not step else []
    return groups + ([("step", [0] + step)] if step else [])


def _session_metrics(model, tokens, variants, st: KLSettings, seed: int, exec_mode: str, progress, memory):
    """One session over ``variants`` (reference first): metrics float64 ``[n, D, N]`` on the device, decode secs."""
    P, N = st.prefill, st.tokens
    D, n = tokens.shape[0], len(variants)
    with DecodeSession(model, variants, window=st.window, seed=seed, backend=st.backend,
                       cuda_graphs=st.cuda_graphs, exec_mode=exec_mode) as s:
        with memory.phase("prefill"):
            logits = s.prefill(tokens[:, :P])
        dev = logits.device                       # the lm_head's device (differs from the input's with device_map)
        toks_in = tokens.to(input_device(model))
        toks = tokens.to(dev)
        out = {m: torch.zeros(n, D, N, device=dev, dtype=torch.float64) for m in METRICS}
        C = 1 if exec_mode == "step" else s.chunk_tokens()
        with memory.phase("decode"):
            _sync(dev)
            t0 = time.perf_counter()
            for c0 in range(0, N, C):
                T = min(C, N - c0)
                if exec_mode != "step":
                    logits = s.feed(toks_in[:, P + c0:P + c0 + T])              # [n*D, T, vocab]
                else:
                    logits = s.step(toks_in[:, P + c0])[:, None]
                for j in range(T):          # one position at a time: float64 [n, D, vocab] per position
                    pm = position_metrics(logits[:, j:j + 1].reshape(n, D, 1, -1),
                                          toks[:, P + c0 + j + 1:P + c0 + j + 2])
                    for m in METRICS:
                        out[m][:, :, c0 + j] = pm[m][:, :, 0]
                if progress is not None:
                    progress.update(T)
            _sync(dev)
            secs = time.perf_counter() - t0
    return out, secs


@torch.no_grad()
def kl_batch(model, tokens: torch.Tensor, variants: list[Variant], st: KLSettings, seed: int,
             progress=None, memory: PhaseMemory | None = None) -> tuple[dict[str, np.ndarray], float]:
    """Teacher-forced metrics of one batch of documents.

    Args:
        tokens: int64 ``[D, P + N + 1]``.
        variants: reference first (``variants[0]`` must be the fp32 reference).
        progress: optional tqdm bar advanced once per decoded position (of every session).
        memory: optional :class:`PhaseMemory` recording the prefill and decode peaks.

    Returns:
        ``({"kl", "nll", "top1", "dp"} -> float32 [n, D, N], decode seconds)``; ``kl[0]`` is 0 (reference).
        With several sessions (chunked replay variants plus step-path conventional ones), each variant's
        metrics are against the reference of its own session.
    """
    if not variants[0].is_reference or variants[0].mode != "replay":
        raise ValueError("the first variant of a KL batch must be the fp32 replay reference")
    P, N = st.prefill, st.tokens
    D, n = tokens.shape[0], len(variants)
    if tokens.shape[1] < P + N + 1:
        raise ValueError(f"documents need {P + N + 1} tokens, got {tokens.shape[1]}")
    memory = memory or PhaseMemory()
    res = {m: np.zeros((n, D, N), np.float32) for m in METRICS}
    secs, first = 0.0, True
    for exec_mode, idx in exec_groups(variants, st.exec_mode):
        out, sec = _session_metrics(model, tokens, [variants[i] for i in idx], st, seed, exec_mode, progress, memory)
        secs += sec
        for m in METRICS:
            arr = out[m].float().cpu().numpy()
            keep = slice(None) if first else slice(1, None)   # the reference's own record from the first session
            res[m][np.asarray(idx)[keep]] = arr[keep]
        first = False
    return res, secs


def run_kl(model, docs: list[Document], variants: list[Variant], st: KLSettings, store: ResultsStore,
           progress: bool = True, stop_after_batches: int | None = None, memory: PhaseMemory | None = None,
           bar=None) -> dict:
    """Run every missing (document, variant) record into ``store``.

    Documents go in fixed batches ``[b * batch_docs, (b + 1) * batch_docs)``; a batch reruns the
    reference plus the variants it still lacks. ``stop_after_batches`` stops early (for tests of
    interruption). ``bar``: a progress object in place of the tqdm bar (``update(n)`` per decoded position,
    ``set_postfix_str(s)`` at each batch, ``close()``; e.g. one that writes the progress to a file).
    Returns a summary dict (batches run, records written, tokens/s, peak memory per phase).
    """
    memory = memory or PhaseMemory()
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
    total_steps = sum(len(exec_groups(vs, st.exec_mode)) for _, _, vs in plan) * st.tokens
    if bar is None:
        bar = tqdm(total=total_steps, desc="KL decode steps", unit="step", disable=not progress or not plan)
    written, tok_total, secs_total = 0, 0, 0.0
    for k, (b, idx, vs) in enumerate(plan):
        if stop_after_batches is not None and k >= stop_after_batches:
            break
        bar.set_postfix_str(f"batch {b + 1}/{nb}, {len(vs)} variants x {len(idx)} docs")
        tokens = torch.stack([docs[i].tokens[:st.prefill + st.tokens + 1] for i in idx])
        res, secs = kl_batch(model, tokens, vs, st, batch_seed(st.seed, b), progress=bar, memory=memory)
        kl, nll = res["kl"], res["nll"]
        for j, v in enumerate(vs):
            for d, i in enumerate(idx):
                if store.done(i, v.slug):
                    continue
                meta = {"doc": doc_key(i), "doc_id": docs[i].doc_id,
                        "tokens_sha": tokens_sha(docs[i].tokens), "variant": v.label, "spec": v.spec.text,
                        "mode": v.mode, "batch": b, "prefill": st.prefill, "tokens": st.tokens,
                        "mean_kl": float(kl[j, d].mean()), "mean_nll": float(nll[j, d].mean())}
                store.write_record(i, v.slug, meta, kl[j, d], nll[j, d], top1=res["top1"][j, d], dp=res["dp"][j, d])
                written += 1
        rows = len(vs) * len(idx)
        store.write_batch(b, {"batch": b, "docs": len(idx), "variants": [v.label for v in vs], "rows": rows,
                              "decode_steps": st.tokens, "decode_seconds": secs,
                              "row_tokens_per_s": rows * st.tokens / secs if secs > 0 else None,
                              "exec": st.exec_mode, "sessions": [g for g, _ in exec_groups(vs, st.exec_mode)],
                              "device": str(input_device(model)), "memory": memory.as_dict()})
        tok_total += rows * st.tokens
        secs_total += secs
    bar.close()
    return {"batches": len(plan), "records_written": written,
            "row_tokens_per_s": tok_total / secs_total if secs_total > 0 else None, "memory": memory.as_dict()}
