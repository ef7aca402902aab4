"""Draft tokens for speculative decoding from prompt lookup (n-gram matching, no draft model).

A draft spec ``ngram:T[:N]`` (:func:`parse_draft`) asks for verify steps of ``T`` tokens: the last
accepted token plus up to ``T - 1`` drafts, found by matching the last ``n`` tokens of the text so far
(prompt + generated) against earlier text, ``n`` from ``N`` (default :data:`DEFAULT_MAX_NGRAM`) down to
1. The drafts are the tokens that followed the match.

Matching rules (:class:`NgramIndex`, checked against a brute-force search in the tests):

* the longest n-gram that occurred before wins (``n = N, N-1, ..., 1``);
* among its earlier occurrences, the most recent one (the one that ends last) wins;
* an occurrence counts only if at least one token follows it (the trailing n-gram itself never matches),
  and the drafts are the up to ``T - 1`` tokens after it (fewer near the end of the text: then fewer drafts);
* no earlier occurrence of any length: no drafts (the verify step is then a plain one-token step).
"""

from __future__ import annotations

from dataclasses import dataclass

#: longest verify step a draft spec may ask for (tokens per verify, the last accepted token included)
MAX_VERIFY_TOKENS = 16
#: longest n-gram matched when a draft spec gives none
DEFAULT_MAX_NGRAM = 3
#: longest n-gram a draft spec may ask to match
MAX_NGRAM = 16

DRAFT_FORMS = (f"draft form: ngram:T[:N] with T in 2..{MAX_VERIFY_TOKENS} the tokens per verify step (the last "
               f"accepted token + up to T-1 drafts) and N in 1..{MAX_NGRAM} the longest n-gram matched (default "
               f"{DEFAULT_MAX_NGRAM}), e.g. ngram:4, ngram:8:5; or none")


@dataclass(frozen=True)
class DraftSpec:
    """Prompt-lookup drafting: ``tokens`` (T) per verify step, n-grams of ``max_ngram`` (N) tokens down to 1."""

    tokens: int
    max_ngram: int = DEFAULT_MAX_NGRAM

    @property
    def num_drafts(self) -> int:
        """Drafts per verify step at most: ``T - 1``."""
        return self.tokens - 1

    @property
    def text(self) -> str:
        """``ngram:T`` (``ngram:T:N`` when N is not the default)."""
        return f"ngram:{self.tokens}" + ("" if self.max_ngram == DEFAULT_MAX_NGRAM else f":{self.max_ngram}")

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.text


def _int_in(name: str, text: str, lo: int, hi: int, whole: str) -> int:
    if not text.strip().isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"bad {name} {text!r} in draft {whole!r} (an integer in {lo}..{hi}); {DRAFT_FORMS}")
    return int(text)


def parse_draft(text: str | DraftSpec | None) -> DraftSpec | None:
    """``ngram:T[:N]`` -> :class:`DraftSpec`; ``None``, ``""``, ``none``, ``off`` -> ``None`` (no speculation);
    ``ValueError`` naming what is allowed otherwise."""
    if text is None or isinstance(text, DraftSpec):
        return text
    if not isinstance(text, str):
        raise ValueError(f"draft must be a string, got {type(text).__name__}; {DRAFT_FORMS}")
    body = text.strip().lower()
    if body in ("", "none", "off"):
        return None
    parts = body.split(":")
    if parts[0] != "ngram":
        raise ValueError(f"unknown drafter {parts[0]!r} in draft {text!r} (only ngram: prompt lookup); {DRAFT_FORMS}")
    if len(parts) not in (2, 3):
        raise ValueError(f"draft {text!r} is not ngram:T or ngram:T:N; {DRAFT_FORMS}")
    tokens = _int_in("T (tokens per verify step)", parts[1], 2, MAX_VERIFY_TOKENS, text)
    ngram = _int_in("N (longest n-gram)", parts[2], 1, MAX_NGRAM, text) if len(parts) == 3 else DEFAULT_MAX_NGRAM
    return DraftSpec(tokens=tokens, max_ngram=ngram)


class NgramIndex:
    """The text of one row (prompt + generated) with, for every n-gram of 1..N tokens, where its most recent
    continuation starts; :meth:`draft` is then a dictionary look-up per n (no scan of the text).

    Args:
        max_ngram: N, the longest n-gram matched.
        tokens: the initial text (the prompt, unpadded).
    """

    def __init__(self, max_ngram: int, tokens=()):
        if max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {max_ngram}")
        self.max_ngram = max_ngram
        self.tokens: list[int] = []
        #: ``_next[n - 1][ngram]`` = position of the token after the most recent occurrence of ``ngram``
        self._next: list[dict[tuple, int]] = [dict() for _ in range(max_ngram)]
        self.extend(tokens)

    def extend(self, tokens) -> None:
        """Append tokens to the text (each one gives the n-grams ending just before it a continuation)."""
        for tok in tokens:
            p = len(self.tokens)
            for n in range(1, min(self.max_ngram, p) + 1):
                self._next[n - 1][tuple(self.tokens[p - n:p])] = p
            self.tokens.append(int(tok))

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` draft tokens for what follows the text (module doc's rules); ``[]`` without a match."""
        if k < 1:
            return []
        L = len(self.tokens)
        for n in range(min(self.max_ngram, L), 0, -1):
            p = self._next[n - 1].get(tuple(self.tokens[L - n:]))
            if p is not None:
                return self.tokens[p:p + k]
        return []
