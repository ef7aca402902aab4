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


# ---- key-value recall (the -long models) ---------------------------------------------------------

def test_recall_instances_are_exact_and_only_before_the_filler():
    tasks = st.generate_recall_tasks(200, seed=11, min_dist=16, max_dist=4000)
    assert tasks == st.generate_recall_tasks(200, seed=11, min_dist=16, max_dist=4000)   # reproducible
    for t in tasks:
        p = t["prompt"]
        head, rest = p.split("\n", 1)
        filler, query = rest.rsplit("\n", 1)
        pairs = dict(x.split("=") for x in head[len("recall "):].split(" "))
        assert list(pairs.items()) == [tuple(x) for x in t["pairs"]] and 2 <= len(pairs) <= 6
        key = t["pairs"][t["query"]][0]
        assert query == f"?{key}=" and t["target"] == pairs[key] and re.fullmatch(r"\d{4}", t["target"])
        assert set(filler) <= set("abcdefghijklmnopqrstuvwxyz .")          # no digit, '=', '?' or newline
        # distance: bytes from the last byte of the queried value to the end of the prompt
        assert t["distance"] == len(p) - (head.index(f"{key}={t['target']}") + len(key) + 5)
        assert t["gen_len"] == 4 and t["task"] == "recall"
    dists = sorted(t["distance"] for t in tasks)
    assert dists[0] < 64 and dists[-1] > 2000


def test_recall_training_text_asks_every_key():
    import random

    t = st.generate_recall_tasks(1, seed=2, min_dist=100, max_dist=100)[0]
    text, spans = st.recall_training_text(t, random.Random(0))
    s = text.decode()
    assert s.startswith(t["prompt"] + t["target"] + "\n")
    assert len(spans) == len(t["pairs"])
    answers = [s[a:b] for a, b in spans]
    asked = [s[a - 4:a - 1] for a, _ in spans]                    # the "?k=" before each answer
    pairs = dict(t["pairs"])
    for ans, q in zip(answers, asked):
        assert ans.endswith("\n") and ans[:-1] == pairs[q[1:3]]
    assert sorted(q[1:3] for q in asked) == sorted(pairs)


def test_recall_heldout_seed_differs_from_training():
    held = st.heldout_recall_tasks(16)
    assert held == st.generate_recall_tasks(16, st.HELDOUT_RECALL_SEED)
    assert all(st.RECALL_MIN_DIST - 8 <= t["distance"] <= st.RECALL_MAX_DIST + 8 for t in held)
    with pytest.raises(ValueError, match="distance"):
        st.make_recall(random.Random(0), 4)


def _numbers(text: str) -> list[int]:
    return [int(x) for x in text.split(" ")]


def test_count_instances_count_from_start_to_end():
    tasks = st.heldout_count_tasks(64)
    assert tasks == st.generate_count_tasks(64, st.HELDOUT_COUNT_SEED)                 # reproducible
    assert tasks != st.generate_count_tasks(64, st.HELDOUT_COUNT_SEED + 1)
    for t in tasks:
        m = re.fullmatch(r"count (\d+) (\d+)\n", t["prompt"])
        nums = _numbers(t["target"])
        assert m and (int(m[1]), int(m[2])) == (t["start"], t["end"]) == (nums[0], nums[-1])
        assert nums == list(range(nums[0], nums[-1] + 1)) and len(nums) >= 2
        assert 0 <= t["start"] <= st.COUNT_MAX_START and t["gen_len"] == len(t["target"].encode())
        assert "\n" not in t["target"] and st.score(t["target"] + "\n?", t["target"])
        assert not st.score(" ".join(map(str, nums[:-1])), t["target"])              # stopping early is wrong
    lens = sorted(t["gen_len"] for t in tasks)
    assert lens[0] < 40 and lens[-1] > 1200 and lens[-1] <= st.COUNT_MAX_LEN
    # never longer than asked, and as long as the next number allows
    for n in (4, 17, 250, 2000):
        t = st.make_count(random.Random(n), n)
        nxt = len(str(t["end"] + 1)) + 1
        assert t["gen_len"] <= max(n, len(f"{t['start']} {t['start'] + 1}")) and t["gen_len"] + nxt > n


def test_count_spans_keep_the_ends_of_long_counts():
    assert st.count_spans(10, 20) == [(10, 21)]
    h, tl = st.COUNT_TRAIN_HEAD, st.COUNT_TRAIN_TAIL
    assert st.count_spans(0, 500) == [(0, h), (500 - tl, 501)]


def test_recall_with_a_counting_filler():
    """count_share: the filler of that share of instances is a count, whose ends are trained; the
    distance stays exact; share 0 (the held-out set) draws exactly what it drew before the option existed."""
    tasks = st.generate_recall_tasks(60, seed=5, min_dist=64, max_dist=3000, count_share=0.5)
    counted = [t for t in tasks if t["trained"]]
    assert 15 <= len(counted) <= 45
    for t in counted:
        p = t["prompt"]
        head, rest = p.split("\n", 1)
        key = t["pairs"][t["query"]][0]
        assert t["distance"] == len(p) - (head.index(f"{key}={t['target']}") + len(key) + 5)
        m = re.match(r"count (\d+) (\d+)\n([0-9 ]+)\n\?[a-z]{2}=$", rest)
        assert m and _numbers(m[3]) == list(range(int(m[1]), int(m[2]) + 1))
        a = len(head) + 1 + m.start(3)
        b = a + len(m[3])                                            # the newline of "\n?k=" follows
        assert p[a:b] == m[3] and t["trained"] == st.count_spans(a, b) and p[b] == "\n"
        text, spans = st.recall_training_text(t, random.Random(0))
        assert spans[:len(t["trained"])] == t["trained"]
    words = [t for t in tasks if not t["trained"]]
    assert words and all(set(t["prompt"].split("\n")[1]) <= set("abcdefghijklmnopqrstuvwxyz .") for t in words)
    plain = st.generate_recall_tasks(20, seed=5)
    assert [t["prompt"] for t in plain] == [t["prompt"] for t in st.generate_recall_tasks(20, seed=5, count_share=0.0)]
    assert all(t["trained"] == [] for t in plain)
    assert all(t["trained"] for t in st.generate_recall_tasks(10, seed=1, count_share=1.0))
    with pytest.raises(ValueError, match="count_share"):
        st.generate_recall_tasks(1, seed=0, count_share=1.5)
