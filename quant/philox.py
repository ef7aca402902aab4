"""Philox-4x32-10 in torch, bit-identical to ``triton.language.philox``.

Used as the reference for the stochastic-rounding bits that the Triton kernels
draw with :func:`replayssm_quant.kernels.rounding.sr_bits8`: one Philox call
gives 16 random bits to each of eight consecutive elements (element ``8 j + 2 w + h``
of a row takes half ``h`` of output word ``w`` of the call with counter ``j``, as the
top 16 bits of a uint32 whose low half is zero), an eighth of the integer work of
one call per element. DESIGN.md asks for at least 16 random bits for 8- and 16-bit
formats and 8 for E2M1; with 16 the rounding probability of a value is within
2**-16 of exact (truncated, so never above it). All arithmetic is
done on int64 tensors holding uint32 values, splitting 32x32-bit products into
16-bit halves so nothing overflows int64.
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF
_KEY_A = 0x9E3779B9
_KEY_B = 0xBB67AE85
_ROUND_A = 0xD2511F53
_ROUND_B = 0xCD9E8D57
N_ROUNDS = 10


def _mul_hi_lo(const: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit halves of ``const * x`` for uint32 ``const`` and int64 ``x`` in [0, 2**32)."""
    x_lo = x & 0xFFFF
    x_hi = x >> 16
    p_lo = const * x_lo            # < 2**48
    p_hi = const * x_hi            # < 2**48
    t = p_hi + (p_lo >> 16)        # == (const * x) >> 16, < 2**49
    hi = t >> 16
    lo = (((t & 0xFFFF) << 16) | (p_lo & 0xFFFF)) & _M32
    return hi, lo


def _as_u32(c, shape, device) -> torch.Tensor:
    if isinstance(c, torch.Tensor):
        if c.dtype.is_floating_point or c.dtype == torch.bool:
            raise ValueError(f"philox counters must be integer tensors, got {c.dtype}")
        t = c.to(device=device, dtype=torch.int64) & _M32   # bitcast of int32 negatives, like Triton
    else:
        t = torch.full((), int(c) & _M32, dtype=torch.int64, device=device)   # a fill: no host-to-device copy
    return t.expand(shape)


def check_seed(seed) -> int:
    """Validate a user seed: a Python int in [0, 2**63)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        try:
            import numpy as np
            if isinstance(seed, np.integer):
                seed = int(seed)
        except ImportError:  # pragma: no cover
            pass
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r} ({type(seed).__name__})")
    if not 0 <= seed < 2 ** 63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed}")
    return seed


def philox4x32(seed: int, c0, c1=0, c2=0, c3=0) -> tuple[torch.Tensor, ...]:
    """The four output words of Philox-4x32 with 10 rounds, as ``tl.philox(seed, c0, c1, c2, c3)``.

    Args:
        seed: int in [0, 2**63); key k0 = low 32 bits, k1 = high 32 bits (as Triton).
        c0, c1, c2, c3: counters, ints or integer tensors (broadcast together);
            negative int32 values are taken as their uint32 bit patterns.

    Returns:
        four int64 tensors (broadcast shape of the counters) of uint32 values in [0, 2**32).
    """
    seed = check_seed(seed)
    tensors = [c for c in (c0, c1, c2, c3) if isinstance(c, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    shape = torch.broadcast_shapes(*[c.shape for c in tensors]) if tensors else torch.Size([])
    c0, c1, c2, c3 = (_as_u32(c, shape, device) for c in (c0, c1, c2, c3))
    k0 = seed & _M32
    k1 = (seed >> 32) & _M32
    for _ in range(N_ROUNDS):
        hi_b, lo_b = _mul_hi_lo(_ROUND_B, c2)
        hi_a, lo_a = _mul_hi_lo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + _KEY_A) & _M32
        k1 = (k1 + _KEY_B) & _M32
    return c0, c1, c2, c3


def philox_uint32(seed: int, c0, c1=0, c2=0, c3=0) -> torch.Tensor:
    """First output word of :func:`philox4x32` (int64 tensor of uint32 values)."""
    return philox4x32(seed, c0, c1, c2, c3)[0]


#: elements that share one Philox call (16 random bits each)
ELEMS_PER_CALL = 8


def grouped_rbits(seed: int, groups: torch.Tensor, c1=0, c2=0, c3=0) -> torch.Tensor:
    """Random bits for eight elements per Philox call, as :func:`replayssm_quant.kernels.rounding.sr_bits8`.

    Args:
        groups: integer tensor ``[..., N]`` of c0 counters (one per group of eight consecutive elements).
        c1, c2, c3: counters broadcastable to ``groups``.

    Returns:
        int64 tensor ``[..., 8 N]`` of uint32 values with zero low halves: element ``8 j + 2 w + h`` = half ``h``
        (0: low, 1: high 16 bits) of word ``w`` of the call on ``groups[..., j]``, times 2**16.
    """
    words = torch.stack(philox4x32(seed, groups, c1, c2, c3), dim=-1)            # [..., N, 4]
    halves = torch.stack(((words & 0xFFFF) << 16, words & 0xFFFF0000), dim=-1)    # [..., N, 4, 2]
    return halves.reshape(*words.shape[:-2], ELEMS_PER_CALL * words.shape[-2])


def flat_rbits(seed: int, numel: int, device="cpu", c2: int = 0, c3: int = 0) -> torch.Tensor:
    """Random bits for a flat tensor of ``numel`` elements: element ``i`` = half ``i % 2`` of word ``(i % 8) // 2``
    of the call with c0 = low, c1 = high 32 bits of ``i // 8`` (:func:`grouped_rbits`).

    Returns:
        int64 tensor ``[numel]`` of uint32 values; matches the Triton quantize kernels.
    """
    g = torch.arange((numel + ELEMS_PER_CALL - 1) // ELEMS_PER_CALL, dtype=torch.int64, device=device)
    return grouped_rbits(seed, g & _M32, g >> 32, c2, c3)[:numel]
