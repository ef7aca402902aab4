"""Row-scaled fp8 / int8 states in the decode paths (issue 24): the checkpoints hold codes plus one fp32 scale per
state row, computed from the exact new state at every cast (load_state, flush, conventional step)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from test_decode import DEV, FAMILIES, _cache, _gen, _rel, _step  # noqa: E402
from test_decode import test_triton_bit_exact_vs_torch as _bit_exact  # noqa: E402

from replayssm_quant.kernels.inputs import random_decode_inputs  # noqa: E402
from replayssm_quant.quant.reference import round_to_format, rowscaled_quantize  # noqa: E402

ROW = ["fp8", "int8"]


@pytest.mark.parametrize("fmt", ROW)
def test_checkpoint_stores_codes_and_one_scale_per_row(fmt):
    HV, K, V = 2, 24, 5
    c = _cache("gdn", fmt, HV, K, V, "torch", slots=3)
    S = torch.randn(1, HV, V, K, generator=_gen(1))
    S[0, 0, 1] *= 1e-6                               # a small row next to O(1) rows: its own scale keeps it
    S[0, 1, 2] = 0.0
    c.load_state(torch.tensor([1], device=DEV), S.to(DEV))
    assert c.hp.data.dtype == (torch.uint8 if fmt == "fp8" else torch.int8) and c.hp.data.shape == (3, HV, V, K)
    assert c.hp.scales.dtype == torch.float32 and c.hp.scales.shape == (3, HV, V)
    codes, d = rowscaled_quantize(S, fmt)
    assert torch.equal(c.hp.data[1].cpu(), codes[0]) and torch.equal(c.hp.scales[1].cpu(), d[0])
    got = c.checkpoint(torch.tensor([1], device=DEV)).cpu()
    assert torch.equal(got, round_to_format(S, fmt))
    step = 2 ** -4 if fmt == "fp8" else 1 / 127      # relative to the row's amax
    amax = S.abs().amax(-1, keepdim=True)
    assert ((got - S).abs() <= amax * step + 1e-30).all()
    assert _rel(got[0, 0, 1], S[0, 0, 1]) < step     # the raw cast would flush this row to zero:
    assert round_to_format(S[0, 0, 1], "e4m3").abs().max() == 0
    assert c.hp.bytes_per_slot() == HV * V * (K + 4)          # codes + one fp32 scale per row


SPECS = [  # (spec, mode, block_v): every decode path that holds an 8-bit row-scaled state
    ("fp8", "replay", 8), ("int8", "replay", None), ("nvfp4/fp8+sr", "replay", None),
    ("nvfp4/int8+sr", "replay", 16), ("int8/fp16", "replay", 8), ("fp8+sr", "conventional", None),
    ("int8+sr", "conventional", 8),
]
BIT_EXACT = [(f, *c, i % 2 == 1) for i, (f, c) in enumerate((f, c) for f in FAMILIES for c in SPECS)]


@pytest.mark.parametrize("family,spec,mode,block_v,split", BIT_EXACT)
def test_rowscaled_triton_bit_exact_vs_torch(family, spec, mode, block_v, split):
    """test_decode's bit-exactness check (checkpoint codes and row scales, read copy, ring, counters, outputs)
    on the row-scaled specs, each family, fused and split launches alternating."""
    _bit_exact(family, spec, mode, block_v, split)
