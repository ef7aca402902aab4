"""Peak memory per phase of a run (model load, prefill, decode), for run.json and the report.

On CUDA: the peak of ``torch.cuda.max_memory_allocated`` inside the phase (the peak statistics are reset at
the phase's start), summed over the GPUs the run uses, and per GPU, and the peak the caching allocator
reserved (``max_memory_reserved``: a reserve far above the allocated peak means fragmentation). On CPU nothing equivalent exists: the
allocated peak is ``None`` and the process's peak resident set size (``ru_maxrss``) is recorded instead,
which is the peak since the process started (so a later phase's value includes the earlier ones).
"""

from __future__ import annotations

import resource
import sys
from contextlib import contextmanager

import torch

PHASES = ("load", "prefill", "decode")
NOTE_CPU = ("cpu: peak_allocated_bytes is not measurable (None); peak_rss_bytes is the process's peak resident "
            "set size since it started (ru_maxrss), cumulative over phases")
NOTE_CUDA = ("cuda: peak_allocated_bytes = torch.cuda.max_memory_allocated within the phase, summed over GPUs; "
             "peak_reserved_bytes = the caching allocator's reserve (what nvidia-smi sees, less the CUDA context)")


def _rss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024     # Linux reports KiB, macOS bytes


class PhaseMemory:
    """Records the peak memory of named phases; ``with mem.phase("prefill"): ...`` (phases may repeat: the
    maximum over repetitions is kept, e.g. one prefill per document batch)."""

    def __init__(self):
        self.cuda = torch.cuda.is_available()
        if self.cuda:   # the allocator's peak counters exist only once CUDA is initialised ("Invalid device argument")
            torch.cuda.init()
        self.peaks: dict[str, dict] = {}

    def _devices(self) -> list[int]:
        return list(range(torch.cuda.device_count())) if self.cuda else []

    @contextmanager
    def phase(self, name: str):
        if name not in PHASES:
            raise ValueError(f"unknown memory phase {name!r}; valid: {', '.join(PHASES)}")
        for d in self._devices():
            torch.cuda.reset_peak_memory_stats(d)
        yield
        if self.cuda:
            per = [int(torch.cuda.max_memory_allocated(d)) for d in self._devices()]
            res = [int(torch.cuda.max_memory_reserved(d)) for d in self._devices()]
            rec = {"peak_allocated_bytes": sum(per), "peak_allocated_bytes_per_gpu": per, "peak_reserved_bytes": sum(res)}
        else:
            rec = {"peak_allocated_bytes": None}
        rec["peak_rss_bytes"] = _rss_bytes()
        old = self.peaks.get(name)
        if old is not None:
            rec = {k: _max(old.get(k), v) for k, v in rec.items()}
        self.peaks[name] = rec

    def as_dict(self) -> dict:
        """``{"note": ..., "load": {...}, "prefill": {...}, "decode": {...}}`` (phases that ran)."""
        return {"note": NOTE_CUDA if self.cuda else NOTE_CPU, **self.peaks}


def _max(a, b):
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, list):
        return [max(x, y) for x, y in zip(a, b)]
    return max(a, b)


def gib(n) -> str:
    """``12.3 GiB`` (or ``n/a`` for None)."""
    return "n/a" if n is None else f"{n / 2 ** 30:.2f} GiB"
