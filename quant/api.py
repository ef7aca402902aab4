"""Public quantization API: :func:`quantize`, :func:`dequantize`, :func:`fake_quantize`.

``quantize(x, fmt, rounding="rne", seed=0)`` returns a :class:`QuantizedTensor`
holding the storage of one format (docs/CONTRACTS.md):

=========  ==========================================================================
format     storage
=========  ==========================================================================
fp32       ``data`` float32, shape of x
bf16/fp16  ``data`` int16 bit patterns, shape of x
e4m3/e5m2  ``data`` uint8 bit patterns, shape of x (raw casts, no scale)
fp8        ``data`` uint8 E4M3 bits, shape of x; ``scales`` float32 decode scales ``[..., R]``
           (one per row of the last dim)
int8       ``data`` int8 codes (-127..127; -128 = NaN), shape of x; ``scales`` float32 ``[..., R]``
nvfp4      ``data`` uint8 codes ``[..., R, C//2]`` (element 2i low nibble),
           ``scales`` uint8 E4M3 bits ``[..., R, C//16]``, ``s_enc`` float32 ``[...]``
=========  ==========================================================================

Rounding semantics (RNE/SR, saturation, NaN, signed zero, NVFP4 arithmetic and
NaN blocks, the row-scaled fp8/int8 scale arithmetic) are those of :mod:`.reference`; the Triton kernels
(:mod:`replayssm_quant.kernels.quantize` and its row-scaled launchers, which ``replayssm_quant.kernels`` registers
here as the ``"triton"`` backend when ``replayssm_quant.kernels`` is imported: quant/ never imports kernels/) give
the same bits. Stochastic
rounding draws Philox bits keyed by ``seed`` and the flat element index
(:func:`.philox.flat_rbits`), so the same seed gives the same result on every
backend and device.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from . import reference as ref
from .formats import FORMATS, ROW_SCALED, get_format
from .philox import check_seed, flat_rbits

BACKENDS = ("auto", "torch", "triton")

#: accelerated implementations by backend name, registered by the package that holds them (:func:`register_backend`)
_ACCELERATED: dict = {}


def register_backend(name: str, impl) -> None:
    """Register ``impl`` as backend ``name`` (``"triton"``: ``"replayssm_quant.kernels.quantize"``, registered when
    ``replayssm_quant.kernels`` is imported): an object, or the name of a module imported on first use, with
    ``quantize_elem(x, fmt, sr, seed)``, ``nvfp4_quantize(x, sr, seed)``, ``rowscaled_quantize(x, fmt, sr, seed)``,
    ``dequantize_elem(bits, fmt)``, ``nvfp4_dequantize(codes, scales, s_enc)`` and ``rowscaled_dequantize(codes,
    scales, fmt)`` returning the storage of :class:`QuantizedTensor`, and ``runs_on(device, fmt, sr, decode)``:
    whether that kernel runs on the device (``"auto"`` takes the torch reference where it does not)."""
    if name not in BACKENDS or name in ("auto", "torch"):
        raise ValueError(f"register_backend: {name!r} is not an accelerated backend name")
    _ACCELERATED[name] = impl


@dataclass
class QuantizedTensor:
    """A tensor stored in one format (see the module docstring for the tensors' dtypes and shapes).

    Attributes:
        fmt: format name (``fp32``, ``bf16``, ``fp16``, ``fp8``, ``int8``, ``e4m3``, ``e5m2``, ``nvfp4``).
        shape: shape of the original float tensor.
        data: element storage (float32 / int16 / uint8 / int8; nvfp4: packed codes).
        scales: nvfp4 block scales (uint8 E4M3 bits), fp8 / int8 row decode scales (float32 ``[..., R]``)
            or None.
        s_enc: nvfp4 second-level encode scale per leading index (float32) or None.
        rounding: ``"rne"`` or ``"sr"``; seed: the SR seed used.
    """

    fmt: str
    shape: torch.Size
    data: torch.Tensor
    scales: torch.Tensor | None = None
    s_enc: torch.Tensor | None = None
    rounding: str = "rne"
    seed: int = 0

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def nbytes(self) -> int:
        """Bytes of storage (data + scales + s_enc)."""
        return sum(t.numel() * t.element_size() for t in (self.data, self.scales, self.s_enc) if t is not None)

    def dequantize(self, backend: str = "auto") -> torch.Tensor:
        return dequantize(self, backend)


def _triton(backend: str, device: torch.device, fmt: str, sr: bool = False, decode: bool = False):
    """The registered Triton implementation when ``backend`` asks for it, else None (the torch reference).
    ``"auto"``: Triton on CUDA tensors once ``replayssm_quant.kernels`` is imported, where its kernel for ``fmt``
    (encode with ``sr``, or ``decode``) runs on the device (the same bits either way)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "torch" or (backend == "auto" and device.type != "cuda"):
        return None
    if backend == "triton" and "triton" not in _ACCELERATED:
        raise ValueError("backend='triton' needs the Triton kernels: import replayssm_quant.kernels first (it "
                         "registers them; replayssm_quant.quant does not import kernels)")
    impl = _ACCELERATED.get("triton")
    if isinstance(impl, str):
        impl = _ACCELERATED["triton"] = importlib.import_module(impl)
    if impl is not None and backend == "auto" and not impl.runs_on(device, fmt, sr, decode):
        return None
    return impl


def _as_float32(x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"x must be a floating-point tensor, got {x.dtype}")
    # float16/bfloat16 convert exactly; float64 is first rounded to float32 (RNE).
    return x.to(torch.float32).contiguous()


def quantize(x: torch.Tensor, fmt, rounding: str = "rne", seed: int = 0, backend: str = "auto") -> QuantizedTensor:
    """Quantize ``x`` into ``fmt``.

    Args:
        x: floating tensor, any shape (float32; float16/bfloat16 are converted exactly,
            float64 is rounded to float32 first). For ``nvfp4``: ``[..., R, C]`` with C a
            multiple of 16; amax (second-level scale) over the last two dims. For ``fp8`` and
            ``int8``: at least one dim; one decode scale per row of the last dim.
        fmt: a name of :data:`FORMATS` (or an alias such as ``fp8e4m3`` or ``float16``) or a FormatInfo.
        rounding: ``"rne"`` (nearest even) or ``"sr"`` (stochastic; not for fp32,
            which has nothing to round).
        seed: SR seed, int in [0, 2**63).
        backend: ``"auto"`` (Triton on CUDA tensors once ``replayssm_quant.kernels`` is imported and where the GPU
            runs its kernel for ``fmt``, torch reference otherwise),
            ``"torch"`` or ``"triton"`` (CPU tensors need TRITON_INTERPRET=1).

    Returns:
        :class:`QuantizedTensor`.
    """
    f = get_format(fmt).name
    ref.check_rounding(rounding)
    seed = check_seed(seed)
    if f == "fp32" and rounding == "sr":
        raise ValueError("rounding='sr' with fmt='fp32' rounds nothing; use rounding='rne' or a format below fp32 "
                         f"({', '.join(n for n in FORMATS if n != 'fp32')})")
    x = _as_float32(x)
    sr = rounding == "sr"
    kq = _triton(backend, x.device, f, sr)
    if kq is not None:
        if f == "nvfp4":
            codes, sb, s_enc = kq.nvfp4_quantize(x, sr, seed)
            return QuantizedTensor(f, x.shape, codes, sb, s_enc, rounding, seed)
        if f in ROW_SCALED:
            codes, d = kq.rowscaled_quantize(x, f, sr, seed)
            return QuantizedTensor(f, x.shape, codes, d, rounding=rounding, seed=seed)
        return QuantizedTensor(f, x.shape, kq.quantize_elem(x, f, sr, seed), rounding=rounding, seed=seed)
    rbits = flat_rbits(seed, x.numel(), x.device).reshape(x.shape) if sr else None
    if f in ROW_SCALED:
        codes, d = ref.rowscaled_quantize(x, f, rounding, rbits)
        return QuantizedTensor(f, x.shape, codes, d, rounding=rounding, seed=seed)
    if f == "nvfp4":
        codes, sb, s_enc = ref.nvfp4_quantize(x, rounding, rbits)
        return QuantizedTensor(f, x.shape, codes, sb, s_enc, rounding, seed)
    if f == "fp32":
        return QuantizedTensor(f, x.shape, x.clone(), rounding=rounding, seed=seed)
    bits = ref.encode_bits(x, f, rounding, rbits)
    dtype = torch.int16 if f in ("bf16", "fp16") else torch.uint8
    return QuantizedTensor(f, x.shape, bits.to(dtype), rounding=rounding, seed=seed)


def dequantize(q: QuantizedTensor, backend: str = "auto") -> torch.Tensor:
    """Decode a :class:`QuantizedTensor` to float32 (shape ``q.shape``)."""
    if not isinstance(q, QuantizedTensor):
        raise ValueError(f"dequantize takes a QuantizedTensor, got {type(q).__name__}")
    f = get_format(q.fmt).name
    kq = _triton(backend, q.device, f, decode=True)
    if kq is not None:
        if f == "nvfp4":
            return kq.nvfp4_dequantize(q.data, q.scales, q.s_enc)
        if f in ROW_SCALED:
            return kq.rowscaled_dequantize(q.data, q.scales, f)
        return kq.dequantize_elem(q.data, f)
    if f in ROW_SCALED:
        return ref.rowscaled_dequantize(q.data, q.scales, f)
    if f == "nvfp4":
        return ref.nvfp4_dequantize(q.data, q.scales, q.s_enc)
    if f == "fp32":
        return q.data.to(torch.float32).clone()
    return ref.decode_bits(q.data, f)


def fake_quantize(x: torch.Tensor, fmt, rounding: str = "rne", seed: int = 0, backend: str = "auto") -> torch.Tensor:
    """``dequantize(quantize(x, fmt, rounding, seed))``: float32, shape of x."""
    return dequantize(quantize(x, fmt, rounding, seed, backend), backend)
