"""A synthetic long-generation task family with exactly checkable answers.

Every instance shows a numbered list of short random items and asks for it back, either
verbatim (``copy``) or with every letter upper-cased (``upper``)::

    prompt : "copy 1:qk3f 2:m9 3:pd0sx\\n"
    target : "1:qk3f 2:m9 3:pd0sx"                    (then the model writes "\\n")

    prompt : "upper 1:qk3f 2:m9 3:pd0sx\\n"
    target : "1:QK3F 2:M9 3:PD0SX"

Items are 2-6 characters from ``a-z0-9``; the item numbers make every position of the list
uniquely addressable, which is what lets a small byte-level hybrid copy thousands of bytes
exactly through attention. Targets never contain a newline, so generation stops at ``"\\n"``
(``until=["\\n"]``). One token is one byte, so ``gen_len`` (target bytes) is the number of
tokens to generate. Target lengths are drawn log-uniformly between ``min_len`` and ``max_len``
(default 32..2000 bytes, a 62x span).

Training uses :func:`training_text` on instances from a training seed; evaluation uses
:func:`heldout_tasks` (seed :data:`HELDOUT_SEED`) and :func:`score`.
"""

from __future__ import annotations

import math
import random

TASKS = ("copy", "upper")
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
HELDOUT_SEED = 20260  # evaluation instances; training draws from other seeds
DEFAULT_MIN_LEN, DEFAULT_MAX_LEN = 32, 2000
UNTIL = ("\n",)


def _transform(task: str, text: str) -> str:
    if task == "copy":
        return text
    if task == "upper":
        return text.upper()
    raise ValueError(f"unknown task {task!r}; allowed: {', '.join(TASKS)}")


def make_task(rng: random.Random, task: str, target_len: int) -> dict:
    """One instance whose target is about ``target_len`` bytes (never more, at least one item).

    Returns ``dict(prompt=str, target=str, task=str, gen_len=int, until=list[str])``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; allowed: {', '.join(TASKS)}")
    if target_len < 4:
        raise ValueError(f"target_len must be >= 4 bytes, got {target_len}")
    items: list[str] = []
    length = -1  # no leading space before the first item
    while True:
        body = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 6)))
        item = f"{len(items) + 1}:{body}"
        if items and length + 1 + len(item) > target_len:
            break
        items.append(item)
        length += 1 + len(item)
        if length >= target_len:
            break
    source = " ".join(items)
    target = _transform(task, source)
    return {"prompt": f"{task} {source}\n", "target": target, "task": task,
            "gen_len": len(target.encode()), "until": list(UNTIL)}


def generate_tasks(n: int, seed: int, min_len: int = DEFAULT_MIN_LEN, max_len: int = DEFAULT_MAX_LEN,
                   tasks=TASKS) -> list[dict]:
    """``n`` instances, reproducible from ``seed``; tasks alternate, lengths log-uniform in [min_len, max_len].

    Each is ``dict(prompt, target, task, gen_len, until)`` (see :func:`make_task`).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 4 <= min_len <= max_len:
        raise ValueError(f"need 4 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    tasks = tuple(tasks)
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise ValueError(f"unknown task(s) {bad or tasks}; allowed: {', '.join(TASKS)}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        u = rng.random()
        target_len = int(round(math.exp(math.log(min_len) + u * (math.log(max_len) - math.log(min_len)))))
        out.append(make_task(rng, tasks[i % len(tasks)], target_len))
    return out


def heldout_tasks(n: int = 64, min_len: int = DEFAULT_MIN_LEN, max_len: int = DEFAULT_MAX_LEN) -> list[dict]:
    """The evaluation instances (seed :data:`HELDOUT_SEED`)."""
    return generate_tasks(n, HELDOUT_SEED, min_len, max_len)


def training_text(task: dict) -> tuple[bytes, int]:
    """The bytes a model trains on for one instance, and where the answer starts.

    Returns ``(prompt + target + "\\n" as bytes, len(prompt bytes))``.
    """
    p = task["prompt"].encode()
    return p + task["target"].encode() + b"\n", len(p)


def score(prediction: str, target: str) -> bool:
    """Exact match: the generation up to its first newline, trailing whitespace removed, equals the target."""
    return prediction.split("\n", 1)[0].rstrip() == target


# ---- long-range key-value recall (the -long models): only a recurrent state can carry it ----------
#
#   prompt : "recall ab=4821 cd=0937 ef=5512\n" + filler + "\n?cd="
#   target : "0937"                                  (then the model writes "\n")
#
# The filler is synthetic lower-case words (no digits, '=', '?' or newline), so the only place the
# value exists is before the filler; ``distance`` is the number of bytes from the last byte of the
# queried value to the end of the prompt. Training examples (:func:`recall_training_text`) ask for
# every key after the filler, in a random order, which gives several trained answers per example.

RECALL_TASK = "recall"
HELDOUT_RECALL_SEED = 20261  # evaluation instances; training draws from other seeds
RECALL_MIN_DIST, RECALL_MAX_DIST = 64, 3072
RECALL_PAIRS = (2, 6)
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _filler(rng: random.Random, n: int) -> str:
    """``n`` bytes of random lower-case words of 1-8 letters separated by spaces (some end in '.')."""
    chars = rng.choices(_LETTERS, k=n)
    i = rng.randint(1, 8)
    while i < n:
        chars[i] = " "
        if rng.random() < 0.08:
            chars[i - 1] = "."
        i += rng.randint(2, 9)
    return "".join(chars)


def make_recall(rng: random.Random, distance: int, n_pairs: int | None = None) -> dict:
    """One key-value recall instance whose queried value lies ~``distance`` bytes before the answer.

    Returns ``dict(prompt, target, task="recall", gen_len=4, until, distance, pairs=[(key, value)], query)``;
    ``distance`` is exact (bytes from the end of the queried value to the end of the prompt).
    """
    if distance < 16:
        raise ValueError(f"recall distance must be >= 16 bytes, got {distance}")
    n = n_pairs or rng.randint(*RECALL_PAIRS)
    keys: list[str] = []
    while len(keys) < n:
        k = rng.choice(_LETTERS) + rng.choice(_LETTERS)
        if k not in keys:
            keys.append(k)
    pairs = [(k, "".join(rng.choice("0123456789") for _ in range(4))) for k in keys]
    qi = rng.randrange(n)
    head = "recall " + " ".join(f"{k}={v}" for k, v in pairs) + "\n"
    # bytes after the queried value up to the end of the prompt, without the filler
    value_end = len("recall ") + sum(len(k) + 1 + len(v) + 1 for k, v in pairs[:qi + 1]) - 1
    query = f"\n?{pairs[qi][0]}="
    fixed = len(head) - value_end + len(query)
    filler = _filler(rng, max(0, distance - fixed))
    prompt = head + filler + query
    return {"prompt": prompt, "target": pairs[qi][1], "task": RECALL_TASK, "gen_len": 4, "until": list(UNTIL),
            "distance": len(prompt) - value_end, "pairs": pairs, "query": qi}


def generate_recall_tasks(n: int, seed: int, min_dist: int = RECALL_MIN_DIST,
                          max_dist: int = RECALL_MAX_DIST) -> list[dict]:
    """``n`` recall instances, reproducible from ``seed``; distances log-uniform in [min_dist, max_dist]."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 16 <= min_dist <= max_dist:
        raise ValueError(f"need 16 <= min_dist <= max_dist, got min_dist={min_dist}, max_dist={max_dist}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        u = rng.random()
        d = int(round(math.exp(math.log(min_dist) + u * (math.log(max_dist) - math.log(min_dist)))))
        out.append(make_recall(rng, d))
    return out


def heldout_recall_tasks(n: int = 256, min_dist: int = RECALL_MIN_DIST, max_dist: int = RECALL_MAX_DIST) -> list[dict]:
    """The recall evaluation instances (seed :data:`HELDOUT_RECALL_SEED`)."""
    return generate_recall_tasks(n, HELDOUT_RECALL_SEED, min_dist, max_dist)


def recall_training_text(task: dict, rng: random.Random) -> tuple[bytes, list[tuple[int, int]]]:
    """Training bytes of a recall instance: the prompt and answer, then every other key asked too.

    Returns ``(bytes, spans)`` with ``spans`` the ``[start, end)`` byte ranges that are trained on
    (each value and its newline).
    """
    text = task["prompt"] + task["target"] + "\n"
    spans = [(len(task["prompt"]), len(text))]
    others = [i for i in range(len(task["pairs"])) if i != task["query"]]
    rng.shuffle(others)
    for i in others:
        k, v = task["pairs"][i]
        text += f"?{k}="
        spans.append((len(text), len(text) + len(v) + 1))
        text += v + "\n"
    return text.encode(), spans
