"""Triton launchers: quantize / dequantize whole tensors into the storage formats.

Each launcher takes contiguous tensors (any number of leading dims, flattened)
and produces exactly the bits of the torch reference
(:mod:`replayssm_quant.quant.reference`), using the device functions of
:mod:`.rounding`. Stochastic rounding gives flat element ``i`` half ``i % 2`` of word ``(i % 8) // 2`` of
``philox(seed, lo32(i // 8), hi32(i // 8), 0, 0)`` (:func:`.rounding.sr_bits8`; the same as
:func:`replayssm_quant.quant.philox.flat_rbits`).

nvfp4 kernels (every block = 16 contiguous fp32, loaded/stored as 128-bit vectors and split
into even/odd elements in registers; int32 block indices, int64 addresses): quantize takes a
fused kernel, one program per state (amax loop, then quantize loop; x crosses DRAM once), for
states of at most :data:`FUSED_MAX_PER` elements, else an amax pass plus a block-parallel pass;
dequantize is block-parallel, one division per block (value = fp32(q * fp32(s_b / s_enc))).

Storage (docs/CONTRACTS.md): fp32 -> float32; bf16/fp16 -> int16 bit patterns;
e4m3/e5m2 -> uint8 (row-scaled fp8 / int8: :mod:`.quantize_rowscaled`); nvfp4 -> codes uint8 ``[..., R, C//2]``, scale bits uint8
``[..., R, C//16]``, s_enc float32 ``[...]``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from replayssm_quant.quant import format_codes as fcode

from . import rounding as rd
from .launch import FP8_CONVERSION_FORMATS, check_device_formats

#: storage dtype of the element formats
STORAGE_DTYPE = {"fp32": torch.float32, "bf16": torch.int16, "fp16": torch.int16,
                 "e4m3": torch.uint8, "e5m2": torch.uint8}

ELEM_BLOCK = 1024
NV_NB = 128    # nvfp4 blocks (of 16 elements) per program
#: nvfp4_quantize: states of at most this many elements (R * C) take the fused single-pass
#: kernel (one program per state); larger ones an amax pass plus a block-parallel pass
FUSED_MAX_PER = 1 << 16


@triton.jit
def _quantize_elem_kernel(x_ptr, out_ptr, n, seed, FMT: tl.constexpr, SR: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if SR:
        g = tl.program_id(0).to(tl.int64) * (BLOCK // 8) + tl.arange(0, BLOCK // 8)[None, :]
        rb = tl.reshape(rd.sr_bits8(seed, g, g >> 32, 0, 0), (BLOCK,))
    else:
        rb = None
    bits = rd.encode_bits(x, FMT, SR, rb)
    if FMT == fcode.FP32:
        tl.store(out_ptr + offs, bits.to(tl.float32, bitcast=True), mask=mask)
    else:
        tl.store(out_ptr + offs, bits.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dequantize_elem_kernel(bits_ptr, out_ptr, n, FMT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(bits_ptr + offs, mask=mask, other=0)
    if FMT == fcode.FP32:
        b = b.to(tl.int32, bitcast=True)
    else:
        b = b.to(tl.int32)
    tl.store(out_ptr + offs, rd.decode_bits(b, FMT), mask=mask)


@triton.jit
def _amax_kernel(x_ptr, amax_ptr, per, BLOCK: tl.constexpr):
    """amax_ptr[l] (int32 bits of a non-negative fp32, zero-initialised) = max over x[l, :per]."""
    lead = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + lead * per + offs, mask=offs < per, other=0.0)
    m = rd.nvfp4_amax(x)
    tl.atomic_max(amax_ptr + lead, m.to(tl.int32, bitcast=True))


@triton.jit
def _nvfp4_quantize_blocks(x_ptr, codes_ptr, sb_ptr, blk, bm, s_enc, seed, SR: tl.constexpr, NB: tl.constexpr):
    """Quantize the 16-element blocks ``blk`` (int32 [NB], mask ``bm``) with encode scale ``s_enc``
    (scalar or [NB, 1]); each block is loaded as one contiguous row (128-bit loads) and split
    into even/odd elements in registers."""
    b64 = blk.to(tl.int64)
    e = b64[:, None] * 16 + tl.arange(0, 16)[None, :]                 # flat element index [NB, 16]
    x = tl.load(x_ptr + e, mask=bm[:, None], other=0.0)
    xe, xo = tl.split(tl.reshape(x, (NB, 8, 2)))
    if SR:
        g = b64[:, None] * 2 + tl.arange(0, 2)[None, :]                 # groups of 8 elements [NB, 2]
        rb_e, rb_o = tl.split(tl.reshape(rd.sr_bits8(seed, g, g >> 32, 0, 0), (NB, 8, 2)))
    else:
        rb_e = None
        rb_o = None
    codes, sbits = rd.nvfp4_encode_pairs(xe, xo, s_enc, SR, rb_e, rb_o)
    tl.store(codes_ptr + b64[:, None] * 8 + tl.arange(0, 8)[None, :], codes, mask=bm[:, None])
    tl.store(sb_ptr + b64, sbits, mask=bm)


@triton.jit
def _nvfp4_quantize_kernel(x_ptr, amax_ptr, codes_ptr, sb_ptr, senc_ptr, nblocks, bper, seed,
                           SR: tl.constexpr, NB: tl.constexpr):
    """NB 16-element blocks per program, after the amax pass; blocks are contiguous in the flat
    tensor (C % 16 == 0), block b belongs to the leading index b // bper (bper = R * C // 16)."""
    blk = tl.program_id(0) * NB + tl.arange(0, NB)
    bm = blk < nblocks
    lead = blk // bper
    amax = tl.load(amax_ptr + lead, mask=bm, other=0).to(tl.float32, bitcast=True)
    s_enc = rd.nvfp4_encode_scale(amax)
    _nvfp4_quantize_blocks(x_ptr, codes_ptr, sb_ptr, blk, bm, s_enc[:, None], seed, SR, NB)
    tl.store(senc_ptr + lead, s_enc, mask=bm & (blk % bper == 0))


@triton.jit
def _nvfp4_quantize_fused_kernel(x_ptr, codes_ptr, sb_ptr, senc_ptr, seed, BPER: tl.constexpr, SR: tl.constexpr,
                                 NB: tl.constexpr):
    """One program per leading index (a state of BPER blocks, a constexpr: one compile per state
    size): amax over the state, then quantize it; the second read of the state comes from
    cache, so x crosses DRAM once."""
    lead = tl.program_id(0)
    first = lead * BPER
    acc = tl.zeros([NB, 16], dtype=tl.float32)          # elementwise running max |x| (NaN -> 0, inf -> FLT_MAX)
    for start in tl.range(0, BPER, NB):
        blk = start + tl.arange(0, NB)
        e = (first + blk).to(tl.int64)[:, None] * 16 + tl.arange(0, 16)[None, :]
        x = tl.load(x_ptr + e, mask=(blk < BPER)[:, None], other=0.0)
        acc = tl.maximum(acc, tl.where(x != x, 0.0, tl.minimum(tl.abs(x), 3.4028234663852886e38)))
    s_enc = rd.nvfp4_encode_scale(rd.nvfp4_amax(acc))
    for start in tl.range(0, BPER, NB):
        blk = start + tl.arange(0, NB)
        _nvfp4_quantize_blocks(x_ptr, codes_ptr, sb_ptr, first + blk, blk < BPER, s_enc, seed, SR, NB)
    tl.store(senc_ptr + lead, s_enc)


@triton.jit
def _nvfp4_dequantize_kernel(codes_ptr, sb_ptr, senc_ptr, out_ptr, nblocks, bper, NB: tl.constexpr):
    """NB blocks per program (int32 block indices, int64 addresses); bper = blocks per leading index."""
    blk = tl.program_id(0) * NB + tl.arange(0, NB)
    bm = blk < nblocks
    b64 = blk.to(tl.int64)
    codes = tl.load(codes_ptr + b64[:, None] * 8 + tl.arange(0, 8)[None, :], mask=bm[:, None], other=0)
    sbits = tl.load(sb_ptr + b64, mask=bm, other=0)
    s_enc = tl.load(senc_ptr + blk // bper, mask=bm, other=1.0)
    y = rd.nvfp4_decode_blocks(codes, sbits, s_enc[:, None])
    tl.store(out_ptr + b64[:, None] * 16 + tl.arange(0, 16)[None, :], y, mask=bm[:, None])


def _check_nblocks(nblocks: int, what: str) -> None:
    """The nvfp4 kernels index blocks in int32."""
    if nblocks > 2 ** 31 - 1 - NV_NB:
        raise ValueError(f"{what}: at most 2**31 - {NV_NB + 1} blocks of 16 elements "
                         f"({(2 ** 31 - 1 - NV_NB) * 16} elements), got {nblocks} blocks")


def _check_input(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise ValueError(f"x must be a float32 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    return x.contiguous()


def _check_out(out, shape, dtype, device, what):
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device or not out.is_contiguous():
        raise ValueError(f"{what}: out must be a contiguous {dtype} tensor of shape {tuple(shape)} on {device}, "
                         f"got {out.dtype} {tuple(out.shape)} on {out.device}")
    return out


def e4m3_formats(fmt: str, sr: bool = False, decode: bool = False) -> tuple[str, ...]:
    """``(fmt,)`` if the kernel that encodes (``decode`` false; SR when ``sr``) or decodes ``fmt`` uses the E4M3
    conversions of :func:`.launch.check_device_formats` (RNE encodes into fp8 / e4m3, decodes of fp8 / e4m3 /
    nvfp4), else ``()`` (integer arithmetic only)."""
    uses = fmt in FP8_CONVERSION_FORMATS and (decode or not (sr or fmt == "nvfp4"))
    return (fmt,) if uses else ()


def runs_on(device, fmt: str, sr: bool = False, decode: bool = False) -> bool:
    """Whether this backend's kernel for ``fmt`` runs on ``device`` (``replayssm_quant.quant``'s ``"auto"`` backend
    takes the torch reference where it does not)."""
    try:
        check_device_formats(device, e4m3_formats(fmt, sr, decode), "")
    except ValueError:
        return False
    return True


def quantize_elem(x: torch.Tensor, fmt: str, sr: bool = False, seed: int = 0, out=None) -> torch.Tensor:
    """Element formats: float32 ``x`` (any shape) -> storage tensor of the same shape
    (float32 / int16 / uint8, see :data:`STORAGE_DTYPE`), written into ``out`` if given."""
    if fmt not in STORAGE_DTYPE:
        raise ValueError(f"quantize_elem: format must be one of {', '.join(STORAGE_DTYPE)}, got {fmt!r}")
    x = _check_input(x)
    check_device_formats(x.device, e4m3_formats(fmt, sr), "quantize_elem")
    out = _check_out(out, x.shape, STORAGE_DTYPE[fmt], x.device, "quantize_elem")
    n = x.numel()
    if n:
        _quantize_elem_kernel[(triton.cdiv(n, ELEM_BLOCK),)](
            x, out, n, seed, FMT=rd.FORMAT_CODE[fmt], SR=bool(sr), BLOCK=ELEM_BLOCK)
    return out


def dequantize_elem(bits: torch.Tensor, fmt: str, out=None) -> torch.Tensor:
    """Storage tensor of an element format -> float32 of the same shape (into ``out`` if given)."""
    if fmt not in STORAGE_DTYPE:
        raise ValueError(f"dequantize_elem: format must be one of {', '.join(STORAGE_DTYPE)}, got {fmt!r}")
    if bits.dtype != STORAGE_DTYPE[fmt]:
        raise ValueError(f"{fmt} storage must be {STORAGE_DTYPE[fmt]}, got {bits.dtype}")
    bits = bits.contiguous()
    check_device_formats(bits.device, e4m3_formats(fmt, decode=True), "dequantize_elem")
    out = _check_out(out, bits.shape, torch.float32, bits.device, "dequantize_elem")
    n = bits.numel()
    if n:
        _dequantize_elem_kernel[(triton.cdiv(n, ELEM_BLOCK),)](bits, out, n, FMT=rd.FORMAT_CODE[fmt], BLOCK=ELEM_BLOCK)
    return out


def nvfp4_quantize(x: torch.Tensor, sr: bool = False, seed: int = 0, out=None):
    """float32 ``x [..., R, C]`` (C % 16 == 0) -> (codes uint8 [..., R, C//2],
    scale_bits uint8 [..., R, C//16], s_enc float32 [...]); ``out`` = optional tuple of the three."""
    x = _check_input(x)
    if x.dim() < 2 or x.shape[-1] % 16 or x.shape[-1] == 0:
        raise ValueError(f"nvfp4 needs x [..., R, C] with C a positive multiple of 16, got shape {tuple(x.shape)}")
    check_device_formats(x.device, e4m3_formats("nvfp4", sr), "nvfp4_quantize")
    *lead_shape, R, C = x.shape
    L = 1
    for d in lead_shape:
        L *= d
    dev = x.device
    o = out if out is not None else (None, None, None)
    codes = _check_out(o[0], (*lead_shape, R, C // 2), torch.uint8, dev, "nvfp4_quantize codes")
    sbits = _check_out(o[1], (*lead_shape, R, C // 16), torch.uint8, dev, "nvfp4_quantize scale_bits")
    s_enc = _check_out(o[2], tuple(lead_shape), torch.float32, dev, "nvfp4_quantize s_enc")
    if L == 0 or R == 0:
        return codes, sbits, s_enc.fill_(1.0)
    per = R * C
    nblocks = L * R * C // 16
    _check_nblocks(nblocks, "nvfp4_quantize")
    if per <= FUSED_MAX_PER:      # one program per state, x read from DRAM once
        nb = min(NV_NB, triton.next_power_of_2(per // 16))
        _nvfp4_quantize_fused_kernel[(L,)](x, codes, sbits, s_enc, seed, BPER=per // 16, SR=bool(sr), NB=nb)
        return codes, sbits, s_enc
    amax = torch.zeros(L, dtype=torch.int32, device=dev)
    _amax_kernel[(L, triton.cdiv(per, 4096))](x, amax, per, BLOCK=4096)
    _nvfp4_quantize_kernel[(triton.cdiv(nblocks, NV_NB),)](x, amax, codes, sbits, s_enc, nblocks, per // 16, seed,
                                                           SR=bool(sr), NB=NV_NB)
    return codes, sbits, s_enc


def nvfp4_dequantize(codes: torch.Tensor, scale_bits: torch.Tensor, s_enc: torch.Tensor, out=None) -> torch.Tensor:
    """Inverse of :func:`nvfp4_quantize` -> float32 ``[..., R, C]`` (into ``out`` if given)."""
    if codes.dtype != torch.uint8 or scale_bits.dtype != torch.uint8 or s_enc.dtype != torch.float32:
        raise ValueError("nvfp4_dequantize needs codes uint8, scale_bits uint8, s_enc float32")
    *lead_shape, R, C2 = codes.shape
    C = 2 * C2
    if tuple(scale_bits.shape) != (*lead_shape, R, C // 16) or tuple(s_enc.shape) != tuple(lead_shape):
        raise ValueError(f"nvfp4 shapes do not match: codes {tuple(codes.shape)}, scale_bits "
                         f"{tuple(scale_bits.shape)}, s_enc {tuple(s_enc.shape)}")
    L = 1
    for d in lead_shape:
        L *= d
    check_device_formats(codes.device, e4m3_formats("nvfp4", decode=True), "nvfp4_dequantize")
    out = _check_out(out, (*lead_shape, R, C), torch.float32, codes.device, "nvfp4_dequantize")
    if L and R and C:
        nblocks = L * R * C // 16
        _check_nblocks(nblocks, "nvfp4_dequantize")
        _nvfp4_dequantize_kernel[(triton.cdiv(nblocks, NV_NB),)](codes.contiguous(), scale_bits.contiguous(),
                                                                 s_enc.contiguous(), out, nblocks, R * C // 16,
                                                                 NB=NV_NB)
    return out


# the row-scaled launchers belong to the same "triton" backend of replayssm_quant.quant
from .quantize_rowscaled import rowscaled_dequantize, rowscaled_quantize  # noqa: E402,F401
