"""Training batches: random windows of the training books mixed with packed task examples.

A batch is ``(input_ids int64 [B, T], labels int64 [B, T], position_ids int64 [B, T], is_task bool [B])``;
labels are the next-token targets already aligned for Hugging Face's causal-LM loss (which shifts
by one), with -100 where no loss is taken. Book rows are ``T`` consecutive bytes of the
concatenated training books (labels = inputs, positions 0..T-1). Task rows pack whole examples
``[<bos>] prompt target "\\n" <eos>`` (the <bos> kept with probability 1/2, so the model works with
and without it); only the ``target "\\n" <eos>`` part is trained on; the unused tail is <pad> with
no loss.

Task rows restart ``position_ids`` at 0 for every example (and for the pad tail). Passed to the
model, this makes transformers build a block-diagonal ("packed sequence") causal mask for the
attention layers, so an example's attention sees only its own prompt -- as at evaluation, where
each prompt is alone and starts at position 0 -- and RoPE positions match evaluation. Without
it, every earlier example in the row offers the same item numbers (``1:``, ``2:``, ...) to the
attention and the copy lookup is ambiguous. (The recurrent GDN / Mamba-2 layers still carry
state across the examples of a row; they see ``<eos>``/``<bos>`` between them.)
"""

from __future__ import annotations

import math
import random

import numpy as np
import torch

from ..models.tokenizer import BOS_ID, EOS_ID, PAD_ID
from ..synthetic_tasks import (COUNT_TASK, DEFAULT_MAX_LEN, DEFAULT_MIN_LEN, TASKS, count_spans, generate_count_tasks,
                               generate_recall_tasks, generate_tasks, recall_training_text, training_text)

#: task families a sampler can mix in: the copy/upper lists (attention copies them) or key-value
#: recall over a long filler (only a recurrent state carries it; the -long models)
TASK_FAMILIES = ("copy", "recall")
#: shortest recall distance in training, and the room a recall row keeps beside the distance
RECALL_TRAIN_MIN_DIST, RECALL_ROW_SLACK = 32, 160


class BatchSampler:
    """Reproducible batches from ``books`` (list of bytes) and the synthetic task family.

    ``task_fraction`` of the rows (rounded, at least one if > 0) are task rows. Task targets
    span ``DEFAULT_MIN_LEN`` .. ``max_task_len`` bytes, where ``max_task_len`` defaults to the
    evaluation maximum ``DEFAULT_MAX_LEN`` or the longest target whose example fits a row
    (``(seq_len - 16) // 2``), whichever is smaller.

    With ``task_family="recall"`` the task rows pack key-value recall examples
    (:func:`~..synthetic_tasks.make_recall`) instead; "task length" is then the recall distance,
    from ``RECALL_TRAIN_MIN_DIST`` to ``max_task_len`` (default ``seq_len - RECALL_ROW_SLACK``), and
    every value asked after the filler is trained on (:func:`~..synthetic_tasks.recall_training_text`).
    ``count_share`` (recall family only) of the recall examples have a counting filler whose numbers are
    trained too, and half as many plain counting examples (:func:`~..synthetic_tasks.make_count`, target
    lengths up to the same maximum) join them: the downstream counting task's format.
    """

    def __init__(self, books: list[bytes], batch_size: int, seq_len: int, task_fraction: float = 0.25,
                 seed: int = 0, max_task_len: int | None = None, separator: bytes = b"\n\n\n",
                 task_family: str = "copy", count_share: float = 0.0):
        if task_family not in TASK_FAMILIES:
            raise ValueError(f"unknown task family {task_family!r}; allowed: {', '.join(TASK_FAMILIES)}")
        self.task_family = task_family
        if not 0.0 <= count_share <= 1.0 or (count_share and task_family != "recall"):
            raise ValueError(f"count_share must be in [0, 1] and needs the recall family, got {count_share} "
                             f"with {task_family!r}")
        self.count_share = count_share
        if batch_size < 1 or seq_len < 64:
            raise ValueError(f"need batch_size >= 1 and seq_len >= 64, got {batch_size}, {seq_len}")
        if not 0.0 <= task_fraction <= 1.0:
            raise ValueError(f"task_fraction must be in [0, 1], got {task_fraction}")
        self.stream = np.frombuffer(separator.join(books), dtype=np.uint8)
        if len(self.stream) <= seq_len + 1:
            raise ValueError(f"training text ({len(self.stream)} bytes) is shorter than one window ({seq_len + 1})")
        self.batch_size, self.seq_len = batch_size, seq_len
        self.n_task = 0 if task_fraction == 0 else max(1, round(batch_size * task_fraction))
        if task_fraction < 1.0 and batch_size > 1:
            self.n_task = min(self.n_task, batch_size - 1)   # keep at least one book row
        if task_family == "recall":
            self.min_task_len = RECALL_TRAIN_MIN_DIST
            self.full_task_len = max_task_len or seq_len - RECALL_ROW_SLACK
            if self.full_task_len > seq_len - RECALL_ROW_SLACK:
                raise ValueError(f"recall distance {self.full_task_len} does not fit a {seq_len}-token row "
                                 f"(at most seq_len - {RECALL_ROW_SLACK})")
        else:
            self.min_task_len = DEFAULT_MIN_LEN
            self.full_task_len = max_task_len or min(DEFAULT_MAX_LEN, (seq_len - 16) // 2)
        if self.full_task_len < self.min_task_len:
            raise ValueError(f"seq_len {seq_len} too short for tasks of at least {DEFAULT_MIN_LEN} bytes")
        self.max_task_len = self.full_task_len   # lowered by set_curriculum early in training
        self.rng = np.random.default_rng(seed)
        self.py_rng = random.Random(seed + 1)
        self._task_seed = 1_000_000 + seed * 1_000_003  # never HELDOUT_SEED
        self._pending: list[dict] = []
        self._pending_len = self.max_task_len

    def set_curriculum(self, progress: float, until: float, start_len: int = 64):
        """Task-length curriculum: the longest target grows log-linearly from ``start_len`` bytes at
        ``progress`` 0 to the full length at ``progress >= until`` (fractions of the run; ``until``
        0 = no curriculum). Short lists first let the attention's copy lookup form on easy,
        unambiguous examples; it then carries over to long lists. (Called from the training loop;
        batches already queued keep their lengths.)"""
        start_len = max(self.min_task_len, min(start_len, self.full_task_len))
        frac = 1.0 if until <= 0 else min(1.0, max(0.0, progress / until))
        new = int(round(math.exp(math.log(start_len) + frac * (math.log(self.full_task_len) - math.log(start_len)))))
        self.max_task_len = new   # one attribute store: safe with the prefetch thread (see _next_task)

    def _next_task(self) -> dict:
        max_len = self.max_task_len   # read once: the training loop may change it (curriculum)
        if not self._pending or self._pending_len != max_len:
            self._task_seed += 1
            if self.task_family == "recall":
                self._pending = generate_recall_tasks(64, self._task_seed, self.min_task_len, max_len, self.count_share)
                if self.count_share:
                    self._pending += generate_count_tasks(round(32 * self.count_share), self._task_seed + 500_000_000,
                                                          min(16, max_len), max_len)
                    self.py_rng.shuffle(self._pending)
            else:
                self._pending = generate_tasks(64, self._task_seed, DEFAULT_MIN_LEN, max_len, TASKS)
            self._pending_len = max_len
        return self._pending.pop()

    def _task_row(self):
        ids = np.full(self.seq_len, PAD_ID, dtype=np.int64)
        labels = np.full(self.seq_len, -100, dtype=np.int64)
        positions = np.zeros(self.seq_len, dtype=np.int64)
        pos = 0
        while True:
            task = self._next_task()
            if self.task_family == "recall" and task["task"] != COUNT_TASK:
                text, spans = recall_training_text(task, self.py_rng)
            else:
                text, p_len = training_text(task)
                spans = count_spans(p_len, len(text) - 1) if task["task"] == COUNT_TASK else [(p_len, len(text))]
            use_bos = self.py_rng.random() < 0.5
            ex = ([BOS_ID] if use_bos else []) + list(text) + [EOS_ID]
            off = 1 if use_bos else 0
            if pos + len(ex) > self.seq_len:
                if pos == 0:  # never happens with the default max_task_len; keep going safely
                    continue
                break
            ids[pos:pos + len(ex)] = ex
            # HF shifts labels left by one inside the loss: label at i is the target of position i-1
            for a, b in spans:
                labels[pos + off + a:pos + off + b] = ex[off + a:off + b]
            labels[pos + len(ex) - 1] = EOS_ID
            positions[pos:pos + len(ex)] = np.arange(len(ex))
            pos += len(ex)
        positions[pos:] = np.arange(self.seq_len - pos)   # the pad tail: a segment of its own
        return ids, labels, positions

    def _book_row(self):
        start = int(self.rng.integers(0, len(self.stream) - self.seq_len))
        ids = self.stream[start:start + self.seq_len].astype(np.int64)
        return ids, ids.copy(), np.arange(self.seq_len, dtype=np.int64)

    def next_batch(self):
        """``(input_ids [B, T], labels [B, T], position_ids [B, T], is_task [B])`` as CPU tensors (int64, bool)."""
        rows = [self._task_row() for _ in range(self.n_task)]
        rows += [self._book_row() for _ in range(self.batch_size - self.n_task)]
        ids = torch.from_numpy(np.stack([r[0] for r in rows]))
        labels = torch.from_numpy(np.stack([r[1] for r in rows]))
        positions = torch.from_numpy(np.stack([r[2] for r in rows]))
        is_task = torch.zeros(self.batch_size, dtype=torch.bool)
        is_task[: self.n_task] = True
        return ids, labels, positions, is_task


def split_validation(books: list[bytes], fraction: float) -> tuple[list[bytes], list[bytes]]:
    """Hold back the last ``fraction`` of every training book for validation (model selection).

    Returns ``(train parts, validation parts)``; with ``fraction`` 0 the validation list is empty.
    """
    if not 0.0 <= fraction < 0.5:
        raise ValueError(f"validation fraction must be in [0, 0.5), got {fraction}")
    train, val = [], []
    for b in books:
        cut = len(b) - int(len(b) * fraction)
        train.append(b[:cut])
        if cut < len(b):
            val.append(b[cut:])
    return train, val


def heldout_windows(books: list[bytes], window: int, max_windows: int | None = None) -> torch.Tensor:
    """Non-overlapping ``window``-byte windows of each held-out book (tails dropped): int64 [n, window].

    With ``max_windows``, that many windows evenly spaced over the list are kept.
    """
    rows = []
    for b in books:
        arr = np.frombuffer(b, dtype=np.uint8)
        for i in range(len(arr) // window):
            rows.append(arr[i * window:(i + 1) * window].astype(np.int64))
    if not rows:
        raise ValueError(f"held-out books are shorter than one {window}-byte window")
    if max_windows is not None and len(rows) > max_windows:
        idx = np.linspace(0, len(rows) - 1, max_windows).round().astype(int)
        rows = [rows[i] for i in idx]
    return torch.from_numpy(np.stack(rows))
