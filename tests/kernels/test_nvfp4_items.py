"""The layout of the few-flush-rows nvfp4 sub-block items (kernels/nvfp4_items.py, ``_nvfp4_item_layout``).

The items themselves are checked bit for bit against the torch reference by the split-flush tests of
test_decode.py; here the rule that sizes them: pairs as items only when they fill at most half of the grid, and
as few sub-blocks per pass-1 item as keep those items within one wave. Runs in the Triton CPU interpreter when
there is no GPU.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replayssm_quant.kernels.nvfp4_items import _nvfp4_item_layout  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _layout_kernel(out_ptr, nrows, HV, NVF: tl.constexpr, NVG: tl.constexpr):
    nh, G, ng = _nvfp4_item_layout(nrows, HV, NVF, NVG)
    if tl.program_id(0) == 0:
        tl.store(out_ptr, nh)
        tl.store(out_ptr + 1, G)
        tl.store(out_ptr + 2, ng)


def _layout(nrows, HV, NVF, NVG, programs):
    out = torch.full((3,), -7, dtype=torch.int32, device=DEV)   # poisoned
    _layout_kernel[(programs,)](out_ptr=out, nrows=nrows, HV=HV, NVF=NVF, NVG=NVG)
    return tuple(out.tolist())


@pytest.mark.parametrize("nrows,HV,NVF,NVG,programs,expect", [
    (4, 32, 8, 0, 528, (128, 2, 4)),     # B = 64 staggered (gdn, kda): 1024 one-sub-block items -> 512 of two
    (1, 32, 8, 0, 528, (32, 1, 8)),      # B = 16 staggered: 256 items fit one wave
    (8, 32, 8, 0, 528, (256, 4, 2)),     # the most pairs that are items (half the grid): 4 sub-blocks each
    (9, 32, 8, 0, 528, (0, 1, 8)),       # more than half the grid: whole-head items (nh = 0)
    (1, 2, 3, 0, 4, (2, 2, 2)),          # the interpreter tests: 3 sub-blocks, groups of 2 and 1
    (3, 2, 3, 0, 8, (0, 1, 3)),
    (1, 2, 3, 4, 4, (2, 4, 1)),          # fixed: more sub-blocks than the head has -> one item per head
    (4, 32, 8, 1, 528, (128, 1, 8)),     # fixed: one sub-block per item (the layout before the rule)
    (0, 32, 8, 0, 528, (0, 1, 8)),       # nothing flushes
])
def test_item_layout(nrows, HV, NVF, NVG, programs, expect):
    nh, G, ng = _layout(nrows, HV, NVF, NVG, programs)
    assert (nh, G, ng) == expect
    if nh:   # every sub-block of a pair in exactly one pass-1 item; the items within one wave unless fixed
        assert (ng - 1) * G < NVF <= ng * G
        assert NVG or G == 1 or nh * ng <= programs < nh * -(-NVF // (G // 2))


@pytest.mark.parametrize("blocks", [2, 4])
def test_pass1_items_write_only_their_pairs_scratch(monkeypatch, blocks):
    """An item of a fixed ``blocks`` sub-blocks may run past its head's three (V = 40, 16-row sub-blocks): those
    rows are all masked and must not be stored, since the next pair's scratch starts right after. With one flush
    row of two heads, the scratch behind the second pair is poisoned before pass 1 and must still be poison after
    it, while both pairs' own rows are written (finite). (The bit-exact tests cannot see a stray store: in the
    interpreter's program order the overwritten rows are written again later.)"""
    from replayssm_quant.kernels import nvfp4_items
    from replayssm_quant.kernels.inputs import random_decode_inputs
    from replayssm_quant.kernels.launch import LaunchKnobs
    from replayssm_quant.kernels.state_cache import SSMStateCache

    real, seen = nvfp4_items._nvfp4_part_kernel, []

    class Spy:   # launches the real pass 1 on a poisoned scratch and keeps what it wrote
        def __getitem__(self, grid):
            def launch(**kw):
                kw["scr_ptr"].fill_(float("nan"))
                real[grid](**kw)
                seen.append((int(kw["nrows_ptr"][0]), kw["scr_ptr"].clone()))
            return launch

    monkeypatch.setattr(nvfp4_items, "_nvfp4_part_kernel", Spy())
    HV, K, V, L = 2, 32, 40, 4
    cache = SSMStateCache("gdn", "nvfp4/fp16", num_slots=2, num_heads=HV, head_k=K, head_v=V, window=L, seed=3,
                          device=DEV, backend="triton",
                          knobs=LaunchKnobs(block_v=16, flush_block_v=16, split_flush=True, flush_nvfp4_items=True,
                                            flush_nvfp4_item_blocks=blocks))
    x = random_decode_inputs("gdn", L, 2, HV, K, V, generator=torch.Generator().manual_seed(4), device=DEV)
    cache.load_state(torch.arange(2, device=DEV), torch.randn(2, HV, V, K).to(DEV))
    for t in range(L):   # slot 0 steps alone until its flush step, where slot 1 joins: one flush row
        idx = torch.arange(1 if t < L - 1 else 2, device=DEV)
        b = idx.numel()
        cache.step(idx, x["q"][t, :b], x["k"][t, :b], x["v"][t, :b], x["g"][t, :b], x["beta"][t, :b])
    nrows, scr = seen[-1]
    pair = 3 * 16 * 32   # NVF * BVF * BK floats per (row, head)
    assert nrows == 1
    assert torch.isfinite(scr[:HV * pair]).all()
    assert torch.isnan(scr[HV * pair:]).all()
