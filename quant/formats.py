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
FP8 = _ieee_like("fp8", 4, 3, 7, 448.0, has_inf=False)
#: OCP E5M2: IEEE-like with infinities; we saturate to 57344 on overflow.
E5M2 = _ieee_like("e5m2", 5, 2, 15, 57344.0, has_inf=True)
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

#: Registry of the state formats, widest first (order defines "wider than").
FORMATS: dict[str, FormatInfo] = {f.name: f for f in (FP32, BF16, FP16, FP8, E5M2, NVFP4)}

#: Aliases accepted in specs.
FORMAT_ALIASES = {"e4m3": "fp8", "fp8e4m3": "fp8", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def get_format(name: str) -> FormatInfo:
    """Look up a format by name or alias; ``ValueError`` listing the valid names otherwise."""
    key = FORMAT_ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else name
    if isinstance(key, FormatInfo):
        return key
    if key not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid formats: {', '.join(FORMATS)}")
    return FORMATS[key]


def precision_rank(fmt: FormatInfo) -> tuple[float, int]:
    """Sort key for "wider": more bits per element, then more mantissa bits.

    fp16 and bf16 both have 16 bits; fp16 has the finer mantissa, bf16 the wider
    range; neither is "wider" than the other for the grammar (both allowed either way).
    """
    return (fmt.bits_per_element, fmt.man_bits)
