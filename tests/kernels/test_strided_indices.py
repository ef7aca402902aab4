"""Index tensors the kernels read by address: a strided (non-contiguous) ``slot_idx`` or ``accepted`` must act as
its values, as its contiguous copy does (the Triton kernels read raw memory), with or without validation; and a
call that fails its checks changes nothing (a pending verify survives a refused step)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels import SSMStateCache  # noqa: E402
from replayssm_quant.kernels.inputs import random_decode_inputs  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = ("q", "k", "v", "g", "beta")


def _cache(backend, mode, spec):
    return SSMStateCache("gdn", spec, num_slots=4, num_heads=2, head_k=16, head_v=8, window=4, mode=mode,
                         backend=backend, max_draft=3, device=DEV, seed=5)


def _inputs(T, B, seed):
    x = random_decode_inputs("gdn", T, B, 2, 16, 8, device=DEV, generator=torch.Generator().manual_seed(seed))
    return [x[n] for n in NAMES]


def _strided(full, dtype):
    """The stride-2 view ``full[::2]``: its gaps hold other valid values, so reading memory gives other values."""
    view = torch.tensor(full, dtype=dtype, device=DEV)[::2]
    assert not view.is_contiguous()
    return view


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("mode,spec", [("replay", "nvfp4/fp8+sr"), ("conventional", "fp8+sr")])
@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_strided_slot_idx_and_accepted_act_as_their_values(backend, mode, spec, validate, idx_dtype):
    a, b = _cache(backend, mode, spec), _cache(backend, mode, spec)
    S = torch.randn(4, 2, 8, 16, generator=torch.Generator().manual_seed(1)).to(DEV)
    for c in (a, b):
        c.load_state(list(range(4)), S)
    strided = _strided([2, 3, 0, 1], idx_dtype)                               # slots 2, 0; memory 2, 3
    plain = strided.contiguous()
    for t, x in enumerate(zip(*_inputs(5, 2, seed=2))):                       # steps, past a flush
        assert torch.equal(a.step(strided, *x, validate=validate), b.step(plain, *x, validate=validate)), t
    xv = [t.transpose(0, 1).contiguous() for t in _inputs(3, 2, seed=4)]     # [B, T, ...]: a verify of T = 3
    assert torch.equal(a.verify(strided, *xv, validate=validate), b.verify(plain, *xv, validate=validate))
    acc = _strided([3, 1, 2, 1], torch.int32)                                # accepted 3, 2; memory 3, 1
    a.commit(strided, acc, validate=validate)
    b.commit(plain, acc.contiguous(), validate=validate)
    sa, sb = a.stored_tensors(), b.stored_tensors()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_refused_step_keeps_the_pending_verify(backend):
    c = _cache(backend, "replay", "fp32")
    c.load_state([0, 1], torch.randn(2, 2, 8, 16).to(DEV))
    xv = [t.transpose(0, 1).contiguous() for t in _inputs(3, 2, seed=6)]
    c.verify([0, 1], *xv)
    q, k, v, g, beta = [t[0] for t in _inputs(1, 2, seed=7)]
    with pytest.raises(ValueError, match="q has shape"):
        c.step([0, 1], q[..., :8], k, v, g, beta)
    assert c.draft_count[:2].tolist() == [3, 3]
    c.commit([0, 1], torch.tensor([2, 3], device=DEV))
    assert c.ring_count[:2].tolist() == [2, 3]
