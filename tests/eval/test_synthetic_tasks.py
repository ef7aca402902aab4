"""The synthetic long-generation task family: instances, lengths, exact-match scoring."""

import random
import re

import pytest

from replayssm_quant.eval import synthetic_tasks as st


def _source(prompt):
    task, rest = prompt.split(" ", 1)
    assert rest.endswith("\n") and rest.count("\n") == 1
    return task, rest[:-1]


def test_instances_are_correct_and_checkable():
    tasks = st.generate_tasks(200, seed=7)
    assert {t["task"] for t in tasks} == set(st.TASKS)
    for t in tasks:
        task, source = _source(t["prompt"])
        assert task == t["task"]
        items = source.split(" ")
        # numbered 1..n, bodies from the alphabet
        for i, item in enumerate(items, 1):
            num, body = item.split(":")
            assert int(num) == i and 2 <= len(body) <= 6 and set(body) <= set(st.ALPHABET)
        expected = source if task == "copy" else source.upper()
        assert t["target"] == expected
        assert "\n" not in t["target"] and t["gen_len"] == len(t["target"].encode())
        assert t["until"] == ["\n"]
        assert st.score(t["target"], t["target"]) and st.score(t["target"] + "\n<eos>junk", t["target"])


def test_lengths_span_tens_to_thousands():
    lens = sorted(t["gen_len"] for t in st.heldout_tasks(256))
    assert lens[0] < 50 and lens[-1] > 1500 and lens[-1] / lens[0] >= 32
    assert lens[-1] <= st.DEFAULT_MAX_LEN
    # log-uniform: every octave between 32 and 1024 is populated
    for lo in (32, 64, 128, 256, 512, 1024):
        assert any(lo <= n < 2 * lo for n in lens), lo


def test_reproducible_and_seed_dependent():
    a, b, c = st.generate_tasks(20, 3), st.generate_tasks(20, 3), st.generate_tasks(20, 4)
    assert a == b and a != c
    held = {t["prompt"] for t in st.heldout_tasks(64)}
    assert not held & {t["prompt"] for t in st.generate_tasks(500, 1_000_001)}


def test_score_is_exact():
    rng = random.Random(0)
    t = st.make_task(rng, "upper", 300)
    tgt = t["target"]
    assert st.score(tgt, tgt)
    assert not st.score(tgt[:-1], tgt)                      # truncated
    assert not st.score(tgt + "X", tgt)                     # too long
    assert not st.score(tgt.lower(), tgt)                   # transform not applied
    for _ in range(20):                                     # any single-byte change
        i = rng.randrange(len(tgt))
        ch = "#" if tgt[i] != "#" else "$"
        assert not st.score(tgt[:i] + ch + tgt[i + 1:], tgt)


def test_training_text_layout():
    t = st.make_task(random.Random(1), "copy", 64)
    text, p = st.training_text(t)
    assert text[:p] == t["prompt"].encode() and text[p:] == t["target"].encode() + b"\n"


@pytest.mark.parametrize("kwargs, msg", [
    (dict(n=1, seed=0, tasks=("reverse",)), "allowed: copy, upper"),
    (dict(n=1, seed=0, min_len=2), "min_len"),
    (dict(n=1, seed=0, min_len=100, max_len=50), "min_len"),
    (dict(n=-1, seed=0), "n must be"),
])
def test_bad_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        st.generate_tasks(**kwargs)
