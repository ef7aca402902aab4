"""The state-spec grammar (DESIGN.md sec. 5).

::

    fp32                 reference, exact
    FMT[+sr]             shared: one checkpoint in FMT serves reads and recurrence
    READ/RECUR[+sr]      separate (Algorithm 3): read copy READ, recurrence RECUR
    FMT in {fp32, bf16, fp16, fp8, int8, e4m3, e5m2, nvfp4}
    +sr                  stochastic rounding on casts into the recurrence checkpoint
                         (the read copy is always round-to-nearest-even)

``fp8`` and ``int8`` are row-scaled (one fp32 decode scale per state row), ``e4m3`` / ``e5m2`` raw
casts. READ/RECUR needs RECUR at least as precise as READ (:data:`.formats.PRECISION_RULE`).

The decode mode (``replay`` with window L, or ``conventional``: rounded every
step) is not part of the string; it is a separate option everywhere.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from .formats import FORMATS, PRECISION_RULE, FormatInfo, at_least_as_precise, get_format

DECODE_MODES = ("replay", "conventional")
DEFAULT_WINDOW = 16

VALID_FORMS = (
    "valid forms: 'fp32' | 'FMT' | 'FMT+sr' | 'READ/RECUR' | 'READ/RECUR+sr' "
    f"with FMT, READ, RECUR in {{{', '.join(FORMATS)}}}, RECUR at least as precise as READ, "
    "+sr only when the recurrence format is below fp32 "
    "(examples: nvfp4+sr, nvfp4/fp8+sr, nvfp4/int8+sr, nvfp4/fp16, fp8/fp16)"
)


@dataclass(frozen=True)
class StateSpec:
    """A parsed state spec.

    Attributes:
        read: format of the copy that serves reads on non-flush steps.
        recur: format of the checkpoint that carries the recurrence.
        sr: stochastic rounding on casts into ``recur``.
        text: the canonical spelling (``nvfp4/fp8+sr``).
    """

    read: FormatInfo
    recur: FormatInfo
    sr: bool

    @property
    def shared(self) -> bool:
        """One checkpoint serves reads and the recurrence."""
        return self.read.name == self.recur.name

    @property
    def is_reference(self) -> bool:
        return self.shared and self.recur.name == "fp32"

    @property
    def text(self) -> str:
        body = self.recur.name if self.shared else f"{self.read.name}/{self.recur.name}"
        return body + ("+sr" if self.sr else "")

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.text

    def state_bytes_per_element(self, head_k: int | None = None) -> float:
        """Bytes of checkpoint storage per state element (both copies); row scales (``fp8``, ``int8``) counted
        for rows of ``head_k`` elements (default :data:`.formats.DEFAULT_ROW_LEN`)."""
        if self.shared:
            return self.recur.bits_at(head_k) / 8
        return (self.read.bits_at(head_k) + self.recur.bits_at(head_k)) / 8

    def step_bytes_per_element(self, mode: str = "replay", window: int = DEFAULT_WINDOW,
                               head_k: int | None = None) -> float:
        """Amortised state bytes moved per element per decode step (DESIGN.md sec. 7).

        conventional: read + write the one state every step: 2 R.
        replay, shared: L reads and 1 write per L steps: R (1 + 1/L).
        replay, separate: (L-1) reads of W, at the flush read R and write R and W:
        W + 2 R / L.
        Row scales (``fp8``, ``int8``) are counted for rows of ``head_k`` elements (default
        :data:`.formats.DEFAULT_ROW_LEN`): 1 + 4 / K bytes per element.
        """
        check_mode(mode)
        window = check_positive_int("window", window)
        r, w = self.recur.bits_at(head_k) / 8, self.read.bits_at(head_k) / 8
        if mode == "conventional":
            if not self.shared:
                raise ValueError(
                    f"spec {self.text!r} has separate read/recurrence formats, which only "
                    "the replay mode has; conventional decoding takes a shared spec (FMT[+sr])"
                )
            return 2.0 * r
        if self.shared:
            return r * (1.0 + 1.0 / window)
        return w + 2.0 * r / window


def check_positive_int(name: str, x) -> int:
    """``x`` as a Python int if it is an integer >= 1 (a Python or numpy integer, not a bool), else ValueError
    naming the argument ``name`` (sizes, windows)."""
    if not isinstance(x, bool):
        try:
            x = operator.index(x)
        except TypeError:
            pass
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name} must be a positive int, got {x!r}")
    return x


def check_mode(mode: str) -> str:
    if mode not in DECODE_MODES:
        raise ValueError(f"unknown decode mode {mode!r}; valid modes: {', '.join(DECODE_MODES)}")
    return mode


def parse_state_spec(text: str) -> StateSpec:
    """Parse ``text`` into a :class:`StateSpec`.

    Raises:
        ValueError: naming the bad part and listing the valid forms.
    """
    if not isinstance(text, str):
        raise ValueError(f"state spec must be a string, got {type(text).__name__}; {VALID_FORMS}")
    raw = text
    s = text.strip().lower()
    if not s:
        raise ValueError(f"empty state spec; {VALID_FORMS}")
    sr = False
    if "+" in s:
        body, _, suffix = s.partition("+")
        if suffix != "sr":
            raise ValueError(f"bad suffix '+{suffix}' in state spec {raw!r} (only '+sr' exists); {VALID_FORMS}")
        s, sr = body, True
    parts = s.split("/")
    if len(parts) > 2:
        raise ValueError(f"too many '/' in state spec {raw!r}: at most READ/RECUR; {VALID_FORMS}")
    for p in parts:
        if not p.strip():
            where = "around '/'" if len(parts) > 1 else "before '+sr'"
            raise ValueError(f"missing format {where} in state spec {raw!r}; {VALID_FORMS}")
    try:
        fmts = [get_format(p.strip()) for p in parts]
    except ValueError as e:
        raise ValueError(f"{e} (in state spec {raw!r}); {VALID_FORMS}") from None
    read, recur = (fmts[0], fmts[0]) if len(fmts) == 1 else (fmts[0], fmts[1])
    if len(fmts) == 2 and read.name == recur.name:   # not silently the shared spec: a different algorithm with +sr
        alt = "" if read.name == "fp32" else f" (e.g. {read.name}/fp32)"
        raise ValueError(f"read copy and recurrence checkpoint are both {read.name} in {raw!r}: a separate spec "
                         f"needs a more precise recurrence format{alt}; for one checkpoint write "
                         f"{read.name}{'+sr' if sr else ''}; {VALID_FORMS}")
    if not at_least_as_precise(recur, read):
        what = "wider than" if read.bits_per_element > recur.bits_per_element else "more precise than"
        raise ValueError(
            f"read format {read.name} is {what} recurrence format {recur.name} in {raw!r}: "
            f"the recurrence must be at least as precise as the read copy ({PRECISION_RULE}); {VALID_FORMS}"
        )
    if sr and recur.name == "fp32":
        raise ValueError(f"'+sr' with an fp32 recurrence checkpoint in {raw!r} rounds nothing; {VALID_FORMS}")
    return StateSpec(read=read, recur=recur, sr=sr)
