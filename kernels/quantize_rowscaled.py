"""Triton launchers: quantize / dequantize whole tensors into the row-scaled ``fp8`` and ``int8`` formats.

A tensor ``[..., C]`` is a stack of rows of ``C`` contiguous elements; each row gets one fp32 decode scale
(storage: codes ``[..., C]`` uint8 E4M3 bits / int8, scales float32 ``[...]``). The bits are those of
:func:`replayssm_quant.quant.reference.rowscaled_quantize` (its module docstring pins the arithmetic); the
device functions are :mod:`.rowscaled`. Stochastic rounding gives flat element ``i`` half ``i % 2`` of word
``(i % 8) // 2`` of ``philox(seed, lo32(i // 8), hi32(i // 8), 0, 0)``, as the element-format quantize
kernels (:mod:`.quantize`) and :func:`replayssm_quant.quant.philox.flat_rbits`.

One program per ``BR`` rows (the row length C is a constexpr: one compile per C): pass 1 reduces the row amaxes over column chunks of ``BC``, pass 2 encodes the
same chunks (the second read comes from cache for rows that fit it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import rounding as rd
from .launch import check_device_formats
from replayssm_quant.quant.format_codes import FORMAT_CODE

from .rowscaled import row_amax, row_decode, row_encode_scaled, row_scales

#: storage dtype of the codes
CODE_DTYPE = {"fp8": torch.uint8, "int8": torch.int8}
#: elements per program tile (BR rows x BC columns)
TILE = 2048
MAX_BC = 1024


@triton.jit
def _flat_rbits(seed, i):
    """uint32 random bits (16, in the top half) of flat elements ``i`` (int64, any 2-D shape), one Philox call
    each: element ``i`` takes half ``i % 2`` of word ``(i % 8) // 2`` of the call with counter ``i // 8``."""
    g = i // 8
    z = (g * 0).to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, (g & 0xFFFFFFFF).to(tl.uint32), (g >> 32).to(tl.uint32), z, z)
    w = (i % 8) // 2
    word = tl.where(w == 0, r0, tl.where(w == 1, r1, tl.where(w == 2, r2, r3)))
    return tl.where(i % 2 == 0, word << 16, (word >> 16) << 16)


@triton.jit
def _rowscaled_quantize_kernel(x_ptr, codes_ptr, d_ptr, n_rows, seed, C: tl.constexpr, FMT: tl.constexpr, SR: tl.constexpr,
                               ALIGNED: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    rm = rows < n_rows
    amax = tl.zeros([BR], dtype=tl.float32)
    for c0 in tl.range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        m = rm[:, None] & (cols < C)[None, :]
        x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m, other=0.0)
        amax = tl.maximum(amax, row_amax(x))
    d, r = row_scales(amax, FMT)
    for c0 in tl.range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        m = rm[:, None] & (cols < C)[None, :]
        offs = rows[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + offs, mask=m, other=0.0)
        if SR:
            if ALIGNED:   # C % 8 == 0: a row's groups of eight are whole, one Philox call per eight elements
                g = (rows[:, None] * C + c0) // 8 + tl.arange(0, BC // 8)[None, :]
                rb = rd.sr_bits8(seed, g, g >> 32, 0, 0)
            else:
                rb = _flat_rbits(seed, offs)
        else:
            rb = None
        code = row_encode_scaled(x, r, FMT, SR, rb)
        tl.store(codes_ptr + offs, code.to(codes_ptr.dtype.element_ty), mask=m)
    tl.store(d_ptr + rows, d, mask=rm)


@triton.jit
def _rowscaled_dequantize_kernel(codes_ptr, d_ptr, out_ptr, n_rows, C: tl.constexpr, FMT: tl.constexpr, BR: tl.constexpr,
                                 BC: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    rm = rows < n_rows
    d = tl.load(d_ptr + rows, mask=rm, other=1.0)
    for c0 in tl.range(0, C, BC):
        cols = c0 + tl.arange(0, BC)
        m = rm[:, None] & (cols < C)[None, :]
        offs = rows[:, None] * C + cols[None, :]
        codes = tl.load(codes_ptr + offs, mask=m, other=0)
        tl.store(out_ptr + offs, row_decode(codes, d, FMT), mask=m)


def _tile(C: int) -> tuple[int, int]:
    bc = min(MAX_BC, max(16, triton.next_power_of_2(C)))
    return max(1, TILE // bc), bc


def _check_fmt(fmt: str, what: str) -> str:
    if fmt not in CODE_DTYPE:
        raise ValueError(f"{what}: format must be one of {', '.join(CODE_DTYPE)} (row-scaled), got {fmt!r}")
    return fmt


def rowscaled_quantize(x: torch.Tensor, fmt: str, sr: bool = False, seed: int = 0, out=None):
    """float32 ``x [..., C]`` (at least one dim) -> (codes ``[..., C]`` uint8 (fp8) / int8 (int8), d float32
    ``[...]``); ``out`` = optional tuple of the two."""
    from .quantize import _check_input, _check_out, e4m3_formats   # (quantize imports this module: no cycle at load)

    _check_fmt(fmt, "rowscaled_quantize")
    x = _check_input(x)
    check_device_formats(x.device, e4m3_formats(fmt, sr), "rowscaled_quantize")
    if x.dim() < 1:
        raise ValueError(f"{fmt} is row-scaled: x needs at least one dim (a row = the last dim), got a scalar")
    o = out if out is not None else (None, None)
    codes = _check_out(o[0], x.shape, CODE_DTYPE[fmt], x.device, "rowscaled_quantize codes")
    d = _check_out(o[1], x.shape[:-1], torch.float32, x.device, "rowscaled_quantize scales")
    C = x.shape[-1]
    n_rows = x.numel() // C if C else 0
    if n_rows == 0:
        return codes, d.fill_(1.0)
    br, bc = _tile(C)
    _rowscaled_quantize_kernel[(triton.cdiv(n_rows, br),)](
        x_ptr=x, codes_ptr=codes, d_ptr=d, n_rows=n_rows, C=C, seed=seed, FMT=FORMAT_CODE[fmt], SR=bool(sr),
        ALIGNED=C % 8 == 0 and bc % 8 == 0, BR=br, BC=bc)
    return codes, d


def rowscaled_dequantize(codes: torch.Tensor, d: torch.Tensor, fmt: str, out=None) -> torch.Tensor:
    """Inverse of :func:`rowscaled_quantize` -> float32 ``[..., C]`` (into ``out`` if given)."""
    from .quantize import _check_out, e4m3_formats

    _check_fmt(fmt, "rowscaled_dequantize")
    if not isinstance(codes, torch.Tensor) or codes.dtype != CODE_DTYPE[fmt]:
        raise ValueError(f"{fmt} codes must be {CODE_DTYPE[fmt]}, got {getattr(codes, 'dtype', type(codes).__name__)}")
    if not isinstance(d, torch.Tensor) or d.dtype != torch.float32 or tuple(d.shape) != tuple(codes.shape[:-1]):
        raise ValueError(f"{fmt} scales must be float32 of shape {tuple(codes.shape[:-1])} (one per row)")
    codes, d = codes.contiguous(), d.contiguous()
    check_device_formats(codes.device, e4m3_formats(fmt, decode=True), "rowscaled_dequantize")
    out = _check_out(out, codes.shape, torch.float32, codes.device, "rowscaled_dequantize")
    C = codes.shape[-1]
    n_rows = codes.numel() // C if C else 0
    if n_rows:
        br, bc = _tile(C)
        _rowscaled_dequantize_kernel[(triton.cdiv(n_rows, br),)](
            codes_ptr=codes, d_ptr=d, out_ptr=out, n_rows=n_rows, C=C, FMT=FORMAT_CODE[fmt], BR=br, BC=bc)
    return out
