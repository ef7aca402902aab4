"""kernels/storage.py::decode_state: the Triton dequantizers (backend="triton", what the chunked window reads
use on a GPU) give the torch reference's float32 values bit for bit, NaN payloads included.

Stored tensors are random bit patterns (every code, NaN codes and int8's -128 included), odd slot counts and
row lengths, gathered through slot indices as the chunked window gathers them.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels.storage import StoredState, decode_state  # noqa: E402
from replayssm_quant.quant.formats import FORMATS  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
STORED = ["fp32", "bf16", "fp16", "e4m3", "e5m2", "fp8", "int8", "nvfp4"]


def _random_bits(t: torch.Tensor, g: torch.Generator) -> None:
    """Fill ``t`` with random bit patterns of its dtype (floats: finite, spread over many binades)."""
    if t.dtype == torch.float32:
        t.copy_(torch.exp(torch.randn(t.shape, generator=g) * 8) * torch.where(torch.rand(t.shape, generator=g) < .5,
                                                                               -1.0, 1.0))
        return
    info = torch.iinfo(t.dtype)
    t.copy_(torch.randint(info.min, info.max + 1, t.shape, generator=g, dtype=torch.int64).to(t.dtype))


@pytest.mark.parametrize("fmt", STORED)
def test_triton_decode_equals_torch_bit_for_bit(fmt):
    S, HV, V, K = 5, 3, 7, 48
    g = torch.Generator().manual_seed(STORED.index(fmt))
    st = StoredState(FORMATS[fmt], S, HV, V, K, DEV)
    for t in (st.data, st.scales, st.s_enc):
        if t is not None:
            _random_bits(t, g)
    if st.s_enc is not None:
        st.s_enc.abs_()                                         # an encode scale is positive
        st.scales[0, 1, 2, 0] = 0x7F                            # a NaN block scale (E4M3) in slot 0
    slots = torch.tensor([4, 0, 2], device=DEV)
    want = st.decode(slots, "torch")
    got = st.decode(slots, "triton")
    assert got.dtype == torch.float32 and got.shape == (3, HV, V, K)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)), \
        f"{fmt}: {(got.view(torch.int32) != want.view(torch.int32)).sum().item()} values differ"
    if fmt != "fp32":
        assert torch.isnan(want).any(), "the random patterns should include NaN codes"


def test_bad_backend_is_named():
    st = StoredState(FORMATS["fp16"], 1, 1, 2, 16, "cpu")
    with pytest.raises(ValueError, match="'torch' or 'triton'"):
        decode_state(st.fmt, st.data, backend="cuda")
