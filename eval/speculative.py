"""Greedy speculative generation with prompt-lookup drafts (Algorithm 2 end to end, DESIGN.md sec. 3).

One model step of a row is one verify of ``T' <= T`` tokens (:meth:`DecodeSession.verify`): its last
accepted token, not yet fed, then the drafts of :class:`.drafting.NgramIndex` over the row's prompt and
generated text. Greedy acceptance: draft ``j`` is accepted while it equals the argmax after the tokens
before it; the row then emits its accepted drafts and the *bonus* token, the argmax after the last accepted
one, and keeps ``1 + accepted drafts`` tokens (:meth:`DecodeSession.accept`). Every emitted token is thus the
argmax the plain greedy decode would have produced at that position, so the output is the non-speculative
greedy output (up to the float rounding of multi-token vs one-token forwards, which could flip an exact tie).

All rows of a batch verify the same ``T'`` (the most drafts any row has, plus one); a row with fewer drafts
fills its tail with copies of its last token, never counted as drafts nor accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from .drafting import NgramIndex


@dataclass
class SpecStats:
    """Counters of one speculative :meth:`DecodeSession.generate` call, over the rows still generating.

    Attributes:
        steps: row-steps: verify forwards summed over the rows that were still generating.
        forwards: model forwards after the prefill (verify calls).
        drafted: draft tokens proposed (fillers excluded).
        accepted: draft tokens accepted.
        emitted: tokens emitted by verify steps (accepted drafts + bonus tokens; the prefill's first token
            is not counted, nor tokens cut after a stop).
        per_row: ``[rows, 4]`` lists of (steps, drafted, accepted, emitted) per row.
    """

    steps: int = 0
    forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    per_row: list = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted tokens (nan when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_step(self) -> float:
        """Tokens emitted per row-step (1.0 for plain decoding; nan without steps)."""
        return self.emitted / self.steps if self.steps else float("nan")

    def as_dict(self) -> dict:
        return dict(steps=self.steps, forwards=self.forwards, drafted=self.drafted, accepted=self.accepted,
                    emitted=self.emitted, acceptance_rate=self.acceptance_rate, tokens_per_step=self.tokens_per_step)


def greedy_accept(drafts: list[list[int]], argmax: list[list[int]]) -> list[int]:
    """Accepted drafts per row: the longest prefix of ``drafts[r]`` with ``drafts[r][j] == argmax[r][j]``
    (``argmax[r][j]``: the argmax after the verify's token ``j``, i.e. the prediction for draft ``j``)."""
    out = []
    for d, a in zip(drafts, argmax):
        n = 0
        while n < len(d) and d[n] == a[n]:
            n += 1
        out.append(n)
    return out


def cut_rows(rows: list[list[int]], stop_ids: set[int], stop_fn: Callable[[int, list[int]], bool] | None
             ) -> list[list[int]]:
    """Each row cut after its first stop token, then at its shortest prefix for which ``stop_fn`` is true."""
    out = []
    for r, row in enumerate(rows):
        for i, tok in enumerate(row):
            if tok in stop_ids:
                row = row[:i + 1]
                break
        if stop_fn is not None:
            for i in range(1, len(row) + 1):
                if stop_fn(r, row[:i]):
                    row = row[:i]
                    break
        out.append(row)
    return out


def _prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    ids = input_ids.cpu().tolist()
    if attention_mask is None:
        return ids
    return [[t for t, m in zip(row, mrow) if m] for row, mrow in zip(ids, attention_mask.cpu().tolist())]


@torch.no_grad()
def speculative_generate(session, input_ids: torch.Tensor, max_new_tokens: int,
                         attention_mask: torch.Tensor | None = None, stop_token_ids: Iterable[int] = (),
                         stop_fn: Callable[[int, list[int]], bool] | None = None) -> list[list[int]]:
    """Greedy speculative generation for every (variant, prompt) row of a draft session (module doc); the
    arguments and the result are those of :meth:`DecodeSession.generate`. ``session.spec_stats`` gets the
    :class:`SpecStats`. ``stop_fn`` is checked after every verify step (each one syncs with the host anyway)."""
    spec = session.draft
    logits = session.prefill(input_ids, attention_mask)
    R, n_var = logits.shape[0], len(session.variants)
    stop_ids = set(int(t) for t in stop_token_ids)
    index = [NgramIndex(spec.max_ngram, p) for p in _prompts(input_ids, attention_mask) * n_var]
    gen = [[t] for t in logits.argmax(-1).cpu().tolist()]
    stats = SpecStats(per_row=[[0, 0, 0, 0] for _ in range(R)])

    def finished(r: int) -> bool:
        row = gen[r]
        return (len(row) >= max_new_tokens or bool(stop_ids.intersection(row))
                or (stop_fn is not None and stop_fn(r, row)))

    done = [finished(r) for r in range(R)]
    known = [0] * R                       # generated tokens already in each row's n-gram index
    while not all(done):
        drafts = []
        for r in range(R):
            index[r].extend(gen[r][known[r]:])
            known[r] = len(gen[r])
            k = 0 if done[r] else min(spec.num_drafts, max_new_tokens - len(gen[r]) - 1)
            drafts.append(index[r].draft(k))
        width = 1 + max(len(d) for d in drafts)
        tokens = [[g[-1]] + d + [g[-1]] * (width - 1 - len(d)) for g, d in zip(gen, drafts)]
        argmax = session.verify(torch.tensor(tokens, dtype=torch.int64)).argmax(-1).cpu().tolist()
        acc = greedy_accept(drafts, argmax)
        session.accept(torch.tensor([1 + a for a in acc], dtype=torch.int64))
        stats.forwards += 1
        for r in range(R):
            if done[r]:
                continue
            gen[r] += drafts[r][:acc[r]] + [argmax[r][acc[r]]]
            row = stats.per_row[r]
            row[0], row[1], row[2] = row[0] + 1, row[1] + len(drafts[r]), row[2] + acc[r]
            done[r] = finished(r)
    out = cut_rows([g[:max_new_tokens] for g in gen], stop_ids, stop_fn)
    for r, row in enumerate(out):
        stats.per_row[r][3] = max(len(row) - 1, 0)
    stats.steps, stats.drafted, stats.accepted, stats.emitted = (sum(x[i] for x in stats.per_row) for i in range(4))
    session.spec_stats = stats
    return out
