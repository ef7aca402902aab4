"""Public API: quantize / dequantize / fake_quantize, storage dtypes and shapes, errors."""

import pytest
import torch

from replayssm_quant.quant import FORMATS, QuantizedTensor, dequantize, fake_quantize, quantize
from replayssm_quant.quant import reference as ref

STORAGE = {"fp32": torch.float32, "bf16": torch.int16, "fp16": torch.int16, "fp8": torch.uint8, "int8": torch.int8,
           "e4m3": torch.uint8, "e5m2": torch.uint8, "nvfp4": torch.uint8}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_roundtrip_shapes_dtypes(fmt):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 32, generator=g)
    q = quantize(x, fmt)
    assert isinstance(q, QuantizedTensor) and q.fmt == fmt and q.shape == x.shape
    assert q.data.dtype == STORAGE[fmt]
    y = dequantize(q)
    assert y.dtype == torch.float32 and y.shape == x.shape
    assert torch.equal(y, ref.round_to_format(x, fmt))
    assert torch.equal(fake_quantize(x, fmt), y)
    if fmt == "nvfp4":
        assert q.data.shape == (2, 3, 5, 16) and q.scales.shape == (2, 3, 5, 2) and q.s_enc.shape == (2, 3)
        assert q.nbytes == 2 * 3 * 5 * 16 + 2 * 3 * 5 * 2 + 2 * 3 * 4
        rel = ((y - x).norm() / x.norm()).item()
        assert rel < 0.2
    elif fmt in ("fp8", "int8"):       # codes + one fp32 decode scale per row of the last dim
        assert q.scales.shape == (2, 3, 5) and q.scales.dtype == torch.float32 and q.s_enc is None
        assert q.nbytes == x.numel() + 2 * 3 * 5 * 4
        assert q.nbytes == x.numel() * FORMATS[fmt].bits_at(32) / 8
    else:
        assert q.nbytes == x.numel() * FORMATS[fmt].bits_per_element / 8
        if fmt == "fp32":
            assert torch.equal(y, x)


def test_fp16_bf16_inputs_and_aliases():
    x = torch.randn(4, 16).to(torch.bfloat16)
    assert torch.equal(dequantize(quantize(x, "bf16")), x.float())
    assert quantize(x, "fp8e4m3").fmt == "e4m3"       # the raw cast; "fp8" is the row-scaled format


def test_nvfp4_packing_low_nibble_first():
    x = torch.zeros(1, 16)
    x[0, 0], x[0, 1] = 6.0, 0.5        # amax 6: s_enc = 448, block scale 448 -> q = x
    q = quantize(x, "nvfp4")
    assert q.data[0, 0].item() == 0x7 | (0x1 << 4)


def test_sr_changes_values_and_stays_close():
    x = torch.randn(64, 64)
    y = fake_quantize(x, "e4m3", "sr", seed=1)
    r = fake_quantize(x, "e4m3")
    assert not torch.equal(y, r)
    assert ((y - x).abs() <= (x.abs() * 2 ** -3) + 2 ** -9).all()


def test_errors():
    x = torch.ones(4, 24)
    with pytest.raises(ValueError, match="multiple of 16"):
        quantize(x, "nvfp4")
    with pytest.raises(ValueError, match="unknown format"):
        quantize(x, "fp4")
    with pytest.raises(ValueError, match="unknown rounding"):
        quantize(x, "fp8", "stochastic")
    with pytest.raises(ValueError, match="rounds nothing"):
        quantize(x, "fp32", "sr")
    with pytest.raises(ValueError, match="seed"):
        quantize(x, "fp8", "sr", seed=-3)
    with pytest.raises(ValueError, match="seed"):
        quantize(x, "fp8", "sr", seed=1.5)
    with pytest.raises(ValueError, match="floating"):
        quantize(torch.ones(3, dtype=torch.int32), "fp8")
    with pytest.raises(ValueError, match="backend"):
        quantize(x, "fp8", backend="cuda")
    with pytest.raises(ValueError, match="QuantizedTensor"):
        dequantize(x)


def test_all_zero_tensor():
    for fmt in FORMATS:
        y = fake_quantize(torch.zeros(3, 32), fmt)
        assert torch.equal(y, torch.zeros(3, 32)) and not torch.isnan(y).any()


@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16), (3, 0), (0,)])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_empty_tensors(shape, rounding):
    """Empty inputs give empty codes and, for empty rows or states, the scales of an amax of 0 (decode scale 1,
    s_enc 1), as the Triton kernels do (tests/kernels/test_quantize_triton.py compares the two)."""
    for fmt in FORMATS:
        if fmt == "fp32" and rounding == "sr" or fmt == "nvfp4" and len(shape) < 2:
            continue
        if fmt == "nvfp4" and (shape[-1] % 16 or not shape[-1]):   # (C = 0 is refused: no blocks)
            continue
        q = quantize(torch.empty(shape), fmt, rounding=rounding)
        assert q.data.numel() == 0 and dequantize(q).shape == torch.Size(shape)
        if fmt in ("fp8", "int8"):
            assert torch.equal(q.scales, torch.ones(shape[:-1]))
        if fmt == "nvfp4":
            assert torch.equal(q.s_enc, torch.ones(shape[:-2]))
