"""Format constants: one :class:`FormatInfo` per storage format (DESIGN.md sec. 4).

Only numbers live here; the reference quantizers are in :mod:`.reference`, the
Triton kernels in :mod:`replayssm_quant.kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FormatInfo:
    """Constants of one element format.

    Attributes:
        name: canonical name used in state specs (``fp32``, ``bf16``, ...).
        exp_bits, man_bits: exponent and explicit mantissa bits of one element.
        bias: exponent bias.
        max_finite: largest finite magnitude (saturation target).
        min_normal: smallest positive normal magnitude.
        min_subnormal: smallest positive subnormal magnitude.
        eps: spacing of representable values just above 1.0 (2**-man_bits).
        block_size: elements sharing one block scale (``None``: no block scale).
        bits_per_element: storage bits per element including amortised block
            scales (NVFP4: 4 + 8/16 = 4.5; the per-(slot, head) fp32 scale is
            not counted, it is O(1) per head).
        has_nan: whether the format has a NaN encoding.
        has_inf: whether the format has an infinity encoding.
        row_scale_bits: bits of the per-row decode scale (``fp8``, ``int8``: one fp32
            per row of the contiguous last dim, 32; 0 for every other format). They
            are not in ``bits_per_element`` (they depend on the row length):
            :meth:`bits_at` adds them.
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float
    min_normal: float
    min_subnormal: float
    block_size: int | None
    bits_per_element: float
    has_nan: bool
    has_inf: bool
    row_scale_bits: int = 0

    @property
    def row_scaled(self) -> bool:
        """One fp32 decode scale per row (``fp8``, ``int8``)."""
        return self.row_scale_bits > 0

    def bits_at(self, row_len: int | None = None) -> float:
        """Storage bits per element for rows of ``row_len`` elements (the key / state dim K), row scale
        included: ``fp8``, ``int8``: 8 + 32/K. ``None``: K = :data:`DEFAULT_ROW_LEN`."""
        if not self.row_scaled:
            return self.bits_per_element
        k = DEFAULT_ROW_LEN if row_len is None else int(row_len)
        if k < 1:
            raise ValueError(f"row length must be >= 1, got {row_len}")
        return self.bits_per_element + self.row_scale_bits / k

    @property
    def eps(self) -> float:
        return 2.0 ** -self.man_bits

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8.0


def _ieee_like(name, e, m, bias, max_finite, has_inf, has_nan=True, bits=None):
    return FormatInfo(
        name=name, exp_bits=e, man_bits=m, bias=bias, max_finite=max_finite,
        min_normal=2.0 ** (1 - bias), min_subnormal=2.0 ** (1 - bias - m),
        block_size=None, bits_per_element=float(bits if bits is not None else 1 + e + m),
        has_nan=has_nan, has_inf=has_inf,
    )


FP32 = _ieee_like("fp32", 8, 23, 127, 3.4028234663852886e38, has_inf=True)
BF16 = _ieee_like("bf16", 8, 7, 127, 3.3895313892515355e38, has_inf=True)
FP16 = _ieee_like("fp16", 5, 10, 15, 65504.0, has_inf=True)
#: OCP E4M3FN: no infinities, S.1111.111 is NaN, max 448.
E4M3 = _ieee_like("e4m3", 4, 3, 7, 448.0, has_inf=False)
#: OCP E5M2: IEEE-like with infinities; we saturate to 57344 on overflow.
E5M2 = _ieee_like("e5m2", 5, 2, 15, 57344.0, has_inf=True)
#: Row-scaled fp8 (DESIGN.md sec. 4): E4M3FN codes, one fp32 decode scale d = amax(row) / 448 per row.
#: The ranges are those of the code times d (relative to the row's amax); min_* are the codes'.
FP8 = FormatInfo(
    name="fp8", exp_bits=4, man_bits=3, bias=7, max_finite=448.0, min_normal=2.0 ** -6,
    min_subnormal=2.0 ** -9, block_size=None, bits_per_element=8.0, has_nan=True, has_inf=False,
    row_scale_bits=32,
)
#: Row-scaled int8: codes -127..127 (two's complement; -128 is the NaN code), d = amax(row) / 127.
#: ``man_bits`` = 7, the magnitude bits below the sign (what the grammar's precision rule compares).
INT8 = FormatInfo(
    name="int8", exp_bits=0, man_bits=7, bias=0, max_finite=127.0, min_normal=1.0,
    min_subnormal=1.0, block_size=None, bits_per_element=8.0, has_nan=True, has_inf=False,
    row_scale_bits=32,
)
#: E2M1 element of NVFP4: {0, .5, 1, 1.5, 2, 3, 4, 6}, no NaN/inf.
E2M1 = FormatInfo(
    name="e2m1", exp_bits=2, man_bits=1, bias=1, max_finite=6.0, min_normal=1.0,
    min_subnormal=0.5, block_size=None, bits_per_element=4.0, has_nan=False, has_inf=False,
)
#: NVFP4: E2M1 elements, 16-element blocks with an E4M3 scale, fp32 scale per (slot, head).
NVFP4 = FormatInfo(
    name="nvfp4", exp_bits=2, man_bits=1, bias=1, max_finite=6.0 * 448.0, min_normal=1.0,
    min_subnormal=0.5, block_size=16, bits_per_element=4.5, has_nan=False, has_inf=False,
)
NVFP4_BLOCK = 16

#: Row length (key / state dim K) at which :meth:`FormatInfo.bits_at` counts the row scale by default
#: (the benchmark shapes of DESIGN.md sec. 7: K = 128).
DEFAULT_ROW_LEN = 128

#: Registry of the state formats, widest first.
FORMATS: dict[str, FormatInfo] = {f.name: f for f in (FP32, BF16, FP16, FP8, INT8, E4M3, E5M2, NVFP4)}

#: the formats with a per-row fp32 decode scale
ROW_SCALED = tuple(n for n, f in FORMATS.items() if f.row_scaled)

#: Aliases accepted in specs (``fp8e4m3`` names the raw E4M3 cast; ``fp8`` is the row-scaled format).
FORMAT_ALIASES = {"fp8e4m3": "e4m3", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def get_format(name: str) -> FormatInfo:
    """Look up a format by name or alias; ``ValueError`` listing the valid names otherwise."""
    key = FORMAT_ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else name
    if isinstance(key, FormatInfo):
        return key
    if key not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid formats: {', '.join(FORMATS)}")
    return FORMATS[key]


def precision_rank(fmt: FormatInfo) -> tuple[float, int]:
    """Sort key: more bits per element, then more mantissa bits."""
    return (fmt.bits_per_element, fmt.man_bits)


#: The grammar's rule "the recurrence is at least as precise as the read copy", in words (error messages, docs).
PRECISION_RULE = ("the recurrence format needs at least the read format's element bits and mantissa bits "
                  "(int8 counts 7), and a row scale if the read format has one at the same element width")


def at_least_as_precise(recur: FormatInfo, read: FormatInfo) -> bool:
    """:data:`PRECISION_RULE`: whether ``recur`` may carry the recurrence under the read copy ``read``.

    Element bits (``bits_per_element``, row scales not counted) and mantissa bits compare separately, so
    ``fp16/bf16`` (bf16 has 3 fewer mantissa bits) and ``fp8/e5m2`` are refused while ``bf16/fp16``,
    ``e5m2/fp8`` and ``fp8/int8`` (int8 keeps 7 bits below the row's amax) are valid; ``fp8/e4m3`` is refused
    (same width, the raw cast loses the row scale) and ``e4m3/fp8`` is valid.
    """
    if recur.bits_per_element < read.bits_per_element or recur.man_bits < read.man_bits:
        return False
    return not (read.row_scaled and not recur.row_scaled and recur.bits_per_element == read.bits_per_element)
