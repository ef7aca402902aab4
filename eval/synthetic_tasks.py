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
