"""Prompt-lookup drafting (eval/drafting.py): the n-gram index against a brute-force search, the matching
rules on hand-made texts, and the draft-spec grammar."""

import random

import pytest

from replayssm_quant.eval.drafting import (DEFAULT_MAX_NGRAM, MAX_NGRAM, MAX_VERIFY_TOKENS, DraftSpec, NgramIndex,
                                           parse_draft)


def brute_force_draft(text: list[int], k: int, max_ngram: int) -> list[int]:
    """The module doc's rules by exhaustive search: longest n, then the occurrence ending last."""
    L = len(text)
    for n in range(min(max_ngram, L), 0, -1):
        suffix = text[L - n:]
        for start in range(L - n - 1, -1, -1):           # occurrences with >= 1 token after them
            if text[start:start + n] == suffix:
                return text[start + n:start + n + k]
    return []


@pytest.mark.parametrize("seed", range(6))
def test_index_equals_brute_force_on_random_texts(seed):
    rng = random.Random(seed)
    vocab = rng.choice([2, 3, 5, 12])                     # small alphabets: many matches of every length
    N, k = rng.randint(1, 5), rng.randint(1, 7)
    text = [rng.randrange(vocab) for _ in range(rng.randint(0, 6))]
    idx = NgramIndex(N, text)
    for _ in range(60):
        assert idx.draft(k) == brute_force_draft(text, k, N), (text, k, N)
        new = [rng.randrange(vocab) for _ in range(rng.randint(1, 3))]
        text += new
        idx.extend(new)
    assert idx.tokens == text


def test_longest_match_wins_over_a_more_recent_shorter_one():
    # "1 2 3" occurred at the start (followed by 7); "3" alone occurred more recently (followed by 9)
    text = [1, 2, 3, 7, 8, 3, 9, 1, 2, 3]
    assert NgramIndex(3, text).draft(2) == [7, 8]
    assert NgramIndex(1, text).draft(2) == [9, 1]         # with N = 1 only the last token is matched


def test_most_recent_occurrence_wins():
    text = [5, 6, 1, 5, 6, 2, 5, 6]
    assert NgramIndex(2, text).draft(3) == [2, 5, 6]


def test_drafts_are_cut_at_the_end_of_the_text_and_overlap_the_suffix():
    assert NgramIndex(3, [4, 4, 4]).draft(5) == [4]        # "4 4" at 0 is followed by the last 4 only
    assert NgramIndex(2, [1, 2, 1, 2]).draft(4) == [1, 2]


def test_no_match_gives_no_drafts():
    assert NgramIndex(3, [1, 2, 3, 4]).draft(3) == []       # no token repeats
    assert NgramIndex(3, []).draft(3) == []
    assert NgramIndex(3, [1]).draft(3) == []                # the trailing n-gram never matches itself
    assert NgramIndex(3, [1, 1, 2]).draft(0) == []


def test_parse_draft_forms():
    assert parse_draft("ngram:4") == DraftSpec(tokens=4, max_ngram=DEFAULT_MAX_NGRAM)
    assert parse_draft(" NGRAM:8:5 ") == DraftSpec(tokens=8, max_ngram=5)
    assert parse_draft("ngram:8:5").num_drafts == 7
    assert parse_draft("ngram:8:5").text == "ngram:8:5" and parse_draft("ngram:2").text == "ngram:2"
    for off in (None, "", "none", "off"):
        assert parse_draft(off) is None
    spec = DraftSpec(3)
    assert parse_draft(spec) is spec


@pytest.mark.parametrize("bad, what", [
    ("ngram:1", "T (tokens per verify step)"), (f"ngram:{MAX_VERIFY_TOKENS + 1}", "T (tokens per verify step)"),
    ("ngram:x", "T (tokens per verify step)"), ("ngram:4:0", "N (longest n-gram)"),
    (f"ngram:4:{MAX_NGRAM + 1}", "N (longest n-gram)"), ("ngram", "is not ngram:T"), ("ngram:4:2:1", "is not ngram:T"),
    ("eagle:4", "unknown drafter 'eagle'"), (4, "must be a string")])
def test_parse_draft_errors_name_what_is_allowed(bad, what):
    with pytest.raises(ValueError) as e:
        parse_draft(bad)
    msg = str(e.value)
    assert what in msg and f"T in 2..{MAX_VERIFY_TOKENS}" in msg and "\n" not in msg
