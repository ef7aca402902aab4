"""A state checkpoint stored in one format, torch side (docs/CONTRACTS.md storage table).

:class:`StoredState` owns the tensors of one checkpoint for ``num_slots`` slots:

=========== =========================================================================
format      tensors
=========== =========================================================================
fp32        ``data float32 [S, HV, V, K]``
bf16, fp16  ``data int16 [S, HV, V, K]`` (bit patterns)
e4m3, e5m2  ``data uint8 [S, HV, V, K]`` (bit patterns)
fp8         ``data uint8 [S, HV, V, K]`` (E4M3 bits), ``scales float32 [S, HV, V]`` (one decode scale per row)
int8        ``data int8 [S, HV, V, K]`` (-127..127, -128 = NaN), ``scales float32 [S, HV, V]``
nvfp4       ``data uint8 [S, HV, V, K//2]`` codes, ``scales uint8 [S, HV, V, K//16]``
            (E4M3 bits), ``s_enc float32 [S, HV]``
=========== =========================================================================

Encoding and decoding go through the bit-exact torch mirror of the Triton
rounding (:mod:`replayssm_quant.quant.reference`), so a checkpoint written here
is bit-identical to one written by the kernels. Stochastic-rounding bits come
from :func:`sr_rbits` (Philox counters of docs/CONTRACTS.md).
"""

from __future__ import annotations

import torch

from replayssm_quant.quant.formats import FormatInfo, NVFP4_BLOCK
from replayssm_quant.quant.philox import ELEMS_PER_CALL, grouped_rbits

#: stream tags (Philox c3)
TAG_FLUSH = 0          # recurrence-checkpoint cast at a flush (and at load_state)
TAG_CONVENTIONAL = 1   # conventional per-step write

_INT_DTYPE = {"bf16": torch.int16, "fp16": torch.int16, "e4m3": torch.uint8, "e5m2": torch.uint8}
_ROW_CODE_DTYPE = {"fp8": torch.uint8, "int8": torch.int8}


def sr_rbits(seed: int, slots: torch.Tensor, num_heads: int, V: int, K: int,
             flush_count: torch.Tensor, tag: int) -> torch.Tensor:
    """Random bits for stochastic rounding of states ``[n, HV, V, K]``.

    Eight elements per Philox call, 16 bits each (docs/CONTRACTS.md): element ``(v, k)`` takes half ``k % 2``
    of word ``(k % 8) // 2`` of the call with c0 = ``v * ceil(K / 8) + k // 8`` (the group inside the (slot,
    head) state), c1 =
    ``slot * HV + head``, c2 = the slot's flush counter, c3 = ``tag``.

    Args:
        slots: int64 ``[n]`` slot indices; flush_count: int ``[n]``.

    Returns:
        int64 ``[n, HV, V, K]`` holding uint32 values.
    """
    dev = slots.device
    KG = -(-K // ELEMS_PER_CALL)   # Philox calls per state row
    c0 = torch.arange(V * KG, device=dev, dtype=torch.int64).view(1, 1, V, KG)
    c1 = (slots.to(torch.int64).view(-1, 1) * num_heads
          + torch.arange(num_heads, device=dev, dtype=torch.int64).view(1, -1)).view(-1, num_heads, 1, 1)
    c2 = flush_count.to(device=dev, dtype=torch.int64).view(-1, 1, 1, 1)
    return grouped_rbits(seed, c0, c1, c2, tag)[..., :K]


class StoredState:
    """One checkpoint (recurrence or read copy) for ``num_slots`` slots in format ``fmt``.

    Attributes:
        fmt: the :class:`FormatInfo`.
        data: float32 / int16 / uint8 tensor (see module docstring).
        scales: uint8 ``[S, HV, V, K//16]`` (nvfp4), float32 ``[S, HV, V]`` (fp8, int8: row decode scales)
            or ``None``.
        s_enc: float32 ``[S, HV]`` (nvfp4) or ``None``.
    """

    def __init__(self, fmt: FormatInfo, num_slots: int, num_heads: int, V: int, K: int, device):
        self.fmt, self.V, self.K = fmt, V, K
        shape = (num_slots, num_heads, V)
        self.scales = self.s_enc = None
        if fmt.name == "fp32":
            self.data = torch.zeros(*shape, K, dtype=torch.float32, device=device)
        elif fmt.name == "nvfp4":
            if K % NVFP4_BLOCK:
                raise ValueError(f"nvfp4 needs the key dim K to be a multiple of {NVFP4_BLOCK}, got K={K}")
            self.data = torch.zeros(*shape, K // 2, dtype=torch.uint8, device=device)
            self.scales = torch.zeros(*shape, K // NVFP4_BLOCK, dtype=torch.uint8, device=device)
            self.s_enc = torch.ones(num_slots, num_heads, dtype=torch.float32, device=device)
        elif fmt.row_scaled:
            self.data = torch.zeros(*shape, K, dtype=_ROW_CODE_DTYPE[fmt.name], device=device)
            self.scales = torch.ones(*shape, dtype=torch.float32, device=device)
        else:
            self.data = torch.zeros(*shape, K, dtype=_INT_DTYPE[fmt.name], device=device)

    def tensors(self):
        """``(data, scales, s_enc)`` for dumping and comparing whole caches; absent parts are ``data`` itself."""
        return self.data, (self.scales if self.scales is not None else self.data), \
            (self.s_enc if self.s_enc is not None else self.data)

    def kernel_tensors(self):
        """``(data, scales, s_enc)`` as the kernels take them: None for the parts a format does not have."""
        return self.data, self.scales, self.s_enc

    def bytes_per_slot(self) -> int:
        n = self.data[0].numel() * self.data.element_size()
        if self.scales is not None:
            n += self.scales[0].numel() * self.scales.element_size()
        if self.s_enc is not None:
            n += self.s_enc[0].numel() * 4
        return n

    def decode(self, slots: torch.Tensor, backend: str = "torch") -> torch.Tensor:
        """float32 ``[n, HV, V, K]`` of the given slots (int64 ``[n]``); ``backend`` as :func:`decode_state`."""
        return decode_state(self.fmt, self.data[slots],
                            None if self.scales is None else self.scales[slots],
                            None if self.s_enc is None else self.s_enc[slots], backend=backend)

    def encode(self, slots: torch.Tensor, x: torch.Tensor, rbits: torch.Tensor | None = None) -> None:
        """Round float32 ``x [n, HV, V, K]`` into the slots; RNE, or SR with ``rbits``."""
        parts = encode_state(self.fmt, x, rbits)
        self.data[slots] = parts[0]
        if self.scales is not None:
            self.scales[slots] = parts[1]
        if self.s_enc is not None:
            self.s_enc[slots] = parts[2]


# ----------------------------------------------------------------------------------------
# codec: the only place that talks to quant.reference
# ----------------------------------------------------------------------------------------

def encode_state(fmt: FormatInfo, x: torch.Tensor, rbits: torch.Tensor | None = None):
    """Round float32 ``x [..., V, K]`` to ``fmt``; returns ``(data, scales, s_enc)`` (see module doc).

    nvfp4: ``s_enc`` is computed from the amax over the last two dims (one per (slot, head)).
    fp8, int8: one decode scale per row, from the amax of that row of ``x`` (the exact new state).
    """
    from replayssm_quant.quant import reference as ref

    x = x.to(torch.float32).contiguous()
    rounding = "rne" if rbits is None else "sr"
    if fmt.name == "fp32":
        return x.clone(), None, None
    if fmt.name == "nvfp4":
        return ref.nvfp4_quantize(x, rounding, rbits)
    if fmt.row_scaled:
        codes, d = ref.rowscaled_quantize(x, fmt.name, rounding, rbits)
        return codes, d, None
    bits = ref.encode_bits(x, fmt.name, rounding, rbits)
    return bits.to(_INT_DTYPE[fmt.name]), None, None


def nvfp4_parts(codes: torch.Tensor, scale_bits: torch.Tensor):
    """An nvfp4 checkpoint's parts as values (``quant.reference.nvfp4_parts``): uint8 codes ``[..., V, K//2]``,
    scale bits ``[..., V, K//16]`` -> (E2M1 values float32 ``[..., V, K]``, block scales s_b float32
    ``[..., V, K//16]``)."""
    from replayssm_quant.quant import reference as ref

    return ref.nvfp4_parts(codes, scale_bits)


#: the implementations of the state operations: the torch reference or the Triton kernels
BACKENDS = ("torch", "triton")


def decode_state(fmt: FormatInfo, data, scales=None, s_enc=None, backend: str = "torch") -> torch.Tensor:
    """Inverse of :func:`encode_state`: float32 ``[..., V, K]``.

    ``backend="triton"``: the Triton dequantizers of :mod:`.quantize` (one launch, bit-identical to the torch
    reference: tests/kernels/test_storage_decode.py); ``"torch"``: the reference's integer ops (on a GPU one
    elementwise kernel per op over int64 copies of the codes).
    """
    from replayssm_quant.quant import reference as ref

    if backend not in BACKENDS:
        raise ValueError(f"decode_state backend must be 'torch' or 'triton', got {backend!r}")
    if fmt.name == "fp32":
        return data.to(torch.float32).clone()
    if backend == "triton":
        from . import quantize as kq

        if fmt.name == "nvfp4":
            return kq.nvfp4_dequantize(data, scales, s_enc)
        if fmt.row_scaled:
            return kq.rowscaled_dequantize(data, scales, fmt.name)
        return kq.dequantize_elem(data, fmt.name)
    if fmt.name == "nvfp4":
        return ref.nvfp4_dequantize(data, scales, s_enc)
    if fmt.row_scaled:
        return ref.rowscaled_dequantize(data, scales, fmt.name)
    bits = data.to(torch.int32)
    if data.dtype == torch.int16:
        bits = bits & 0xFFFF
    return ref.decode_bits(bits, fmt.name)
