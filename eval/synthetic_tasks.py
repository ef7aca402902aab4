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


def _check_draw(n: int, lo: int, hi: int, floor: int, what: str) -> None:
    """The shared argument checks of the generators: ``n >= 0`` and ``floor <= lo <= hi`` (``what``: their names)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not floor <= lo <= hi:
        a, b = what.split(",")
        raise ValueError(f"need {floor} <= {a} <= {b}, got {a}={lo}, {b}={hi}")


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    """An integer drawn log-uniformly in [lo, hi] (one ``rng.random()``)."""
    u = rng.random()
    return int(round(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))))


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
    _check_draw(n, min_len, max_len, 4, "min_len,max_len")
    tasks = tuple(tasks)
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise ValueError(f"unknown task(s) {bad or tasks}; allowed: {', '.join(TASKS)}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(make_task(rng, tasks[i % len(tasks)], _log_uniform(rng, min_len, max_len)))
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


def make_recall(rng: random.Random, distance: int, n_pairs: int | None = None, count_filler: bool = False) -> dict:
    """One key-value recall instance whose queried value lies ~``distance`` bytes before the answer.

    Returns ``dict(prompt, target, task="recall", gen_len=4, until, distance, pairs=[(key, value)], query,
    trained)``; ``distance`` is exact (bytes from the end of the queried value to the end of the prompt).
    With ``count_filler`` the filler is a counting example (``"count S E\n"`` and its numbers, see
    :func:`make_count`) instead of random words; ``trained`` lists the ``[start, end)`` prompt bytes a
    training example also learns (the ends of the numbers and the newline after them, :func:`count_spans`;
    empty for word filler).
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
    trained = []
    if count_filler:
        start = rng.randint(0, COUNT_MAX_START)
        numbers, end = count_text(start, max(4, distance - fixed - len(f"count {start} {start + distance}\n")))
        filler = f"count {start} {end}\n" + numbers
        trained = count_spans(len(head) + len(filler) - len(numbers), len(head) + len(filler))
    else:
        filler = _filler(rng, max(0, distance - fixed))
    prompt = head + filler + query
    return {"prompt": prompt, "target": pairs[qi][1], "task": RECALL_TASK, "gen_len": 4, "until": list(UNTIL),
            "distance": len(prompt) - value_end, "pairs": pairs, "query": qi, "trained": trained}


def generate_recall_tasks(n: int, seed: int, min_dist: int = RECALL_MIN_DIST,
                          max_dist: int = RECALL_MAX_DIST, count_share: float = 0.0) -> list[dict]:
    """``n`` recall instances, reproducible from ``seed``; distances log-uniform in [min_dist, max_dist];
    a ``count_share`` of them (drawn per instance) with a counting filler (``make_recall(count_filler=True)``)."""
    if not 0.0 <= count_share <= 1.0:
        raise ValueError(f"count_share must be in [0, 1], got {count_share}")
    _check_draw(n, min_dist, max_dist, 16, "min_dist,max_dist")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        d = _log_uniform(rng, min_dist, max_dist)
        # no draw at count_share 0: the word-filler instances (the held-out set) stay what they were
        out.append(make_recall(rng, d, count_filler=count_share > 0 and rng.random() < count_share))
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
    spans = list(task.get("trained", [])) + [(len(task["prompt"]), len(text))]
    others = [i for i in range(len(task["pairs"])) if i != task["query"]]
    rng.shuffle(others)
    for i in others:
        k, v = task["pairs"][i]
        text += f"?{k}="
        spans.append((len(text), len(text) + len(v) + 1))
        text += v + "\n"
    return text.encode(), spans


# ---- counting to a number given at the start (the -long models): a long generation that needs the state --
#
#   prompt : "count 117 388\n"
#   target : "117 118 119 ... 388"                   (then the model writes "\n")
#
# Each next number follows from the last few bytes, but where to stop (the end number, given
# ``gen_len`` bytes before the stop) is only in what the model carried since the prompt: past the
# model's short-range machinery (conv window, a layer-0 attention that sees byte embeddings only)
# that is the recurrent state. ``gen_len`` is the target's byte count, drawn log-uniformly as for
# copy/upper, so the generation-length quartiles span 16..2000 bytes. In training (``count_share``
# of :func:`generate_recall_tasks`) a count also serves as the filler of a recall example, so one
# example trains both memories.

COUNT_TASK = "count"
HELDOUT_COUNT_SEED = 20262  # evaluation instances; training draws from other seeds
COUNT_MIN_LEN, COUNT_MAX_LEN = 16, 2000
COUNT_MAX_START = 899
#: trained bytes of a counting sequence in training: its first and its last bytes (and the newline)
COUNT_TRAIN_HEAD, COUNT_TRAIN_TAIL = 16, 32


def count_spans(a: int, b: int) -> list[tuple[int, int]]:
    """The trained ``[start, end)`` ranges of counting numbers at bytes ``a..b-1`` followed by "\n" at ``b``.

    Only the first :data:`COUNT_TRAIN_HEAD` and the last :data:`COUNT_TRAIN_TAIL` bytes and the newline:
    the increments are learnt there as well as anywhere, the stop (the long-range part) is in the tail,
    and a count's hundreds of predictable bytes would otherwise outweigh the few answer bytes of the
    recall examples in the task loss (a mean over all trained bytes).
    """
    if b - a <= COUNT_TRAIN_HEAD + COUNT_TRAIN_TAIL:
        return [(a, b + 1)]
    return [(a, a + COUNT_TRAIN_HEAD), (b - COUNT_TRAIN_TAIL, b + 1)]


def count_text(start: int, target_len: int) -> tuple[str, int]:
    """``"start start+1 ..."`` as long as it stays <= ``target_len`` bytes (at least two numbers) and its last number."""
    parts, length, n = [str(start)], len(str(start)), start
    while length + 1 + len(str(n + 1)) <= target_len or len(parts) < 2:
        n += 1
        parts.append(str(n))
        length += 1 + len(parts[-1])
    return " ".join(parts), n


def make_count(rng: random.Random, target_len: int) -> dict:
    """One counting instance whose target is about ``target_len`` bytes (never more, at least two numbers).

    Returns ``dict(prompt, target, task="count", gen_len, until, start, end)``.
    """
    if target_len < 4:
        raise ValueError(f"target_len must be >= 4 bytes, got {target_len}")
    start = rng.randint(0, COUNT_MAX_START)
    target, end = count_text(start, target_len)
    return {"prompt": f"count {start} {end}\n", "target": target, "task": COUNT_TASK, "gen_len": len(target),
            "until": list(UNTIL), "start": start, "end": end}


def generate_count_tasks(n: int, seed: int, min_len: int = COUNT_MIN_LEN, max_len: int = COUNT_MAX_LEN) -> list[dict]:
    """``n`` counting instances, reproducible from ``seed``; target lengths log-uniform in [min_len, max_len]."""
    _check_draw(n, min_len, max_len, 4, "min_len,max_len")
    rng = random.Random(seed)
    return [make_count(rng, _log_uniform(rng, min_len, max_len)) for _ in range(n)]


def heldout_count_tasks(n: int = 64, min_len: int = COUNT_MIN_LEN, max_len: int = COUNT_MAX_LEN) -> list[dict]:
    """The counting evaluation instances (seed :data:`HELDOUT_COUNT_SEED`)."""
    return generate_count_tasks(n, HELDOUT_COUNT_SEED, min_len, max_len)
