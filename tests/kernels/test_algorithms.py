"""Algorithms 1 and 3 (kernels.naive.replay_decode, float64): the reference the kernels and kernels/reference.py
follow.

In exact arithmetic replay decoding is the plain recurrence (both algorithms equal the float64 oracle). With a
rounded read copy (Algorithm 3) the non-flush outputs carry the read format's error while the recurrence
checkpoint does not; with one rounded checkpoint (Algorithm 1) the error enters the recurrence. The Triton kernel
(interpreter) and the torch mirror follow the float64 reference of their algorithm to fp32 rounding, far closer
than either is to the exact recurrence.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels import SSMStateCache, oracle_sequence  # noqa: E402
from replayssm_quant.kernels.inputs import random_decode_inputs  # noqa: E402
from replayssm_quant.kernels.naive import replay_decode  # noqa: E402
from replayssm_quant.quant.reference import round_to_format  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = ("q", "k", "v", "g", "beta")


def _rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).abs().max() / b.abs().max()).item()


def _rounder(fmt):
    """A float64 state rounded (RNE) into ``fmt`` and back, as a flush casts it."""
    return lambda S: round_to_format(S.float(), fmt).double()


def _inputs(family, T, B, HV, K, V, seed):
    x = random_decode_inputs(family, T, B, HV, K, V, generator=torch.Generator().manual_seed(seed), decay_scale=0.02)
    S0 = torch.randn(B, HV, V, K, generator=torch.Generator().manual_seed(seed + 1))
    return x, S0


@pytest.mark.parametrize("family", ["mamba2", "gdn", "kda"])
def test_replay_decode_is_the_recurrence_in_exact_arithmetic(family):
    x, S0 = _inputs(family, 11, 2, 2, 8, 5, 3)
    o_ref, s_ref = oracle_sequence(family, S0, *(x[n] for n in NAMES))
    exact = lambda S: S   # noqa: E731   (a "read format" that rounds nothing: Algorithm 3's path, exact)
    for kw in (dict(), dict(read=exact)):
        o, ck = replay_decode(family, S0, *(x[n] for n in NAMES), window=4, **kw)
        assert _rel(o, o_ref) < 1e-12
        assert _rel(ck[3::4], s_ref[3::4]) < 1e-12          # the checkpoint after each flush is the state


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("family", ["mamba2", "gdn", "kda"])
def test_kernels_follow_algorithm_3(family, backend):
    """bf16/fp32: outputs and the fp32 recurrence checkpoint of the cache equal Algorithm 3 in float64 (read copy
    bf16, recurrence fp32) to fp32 rounding, while the read copy's error is visible against the exact recurrence."""
    HV, K, V, L, T = 2, 32, 12, 4, 10
    x, S0 = _inputs(family, T, 2, HV, K, V, 5)
    o_alg, ck_alg = replay_decode(family, S0, *(x[n] for n in NAMES), window=L, read=_rounder("bf16"),
                                  recur=_rounder("fp32"))
    o_ref, _ = oracle_sequence(family, S0, *(x[n] for n in NAMES))
    c = SSMStateCache(family, "bf16/fp32", 2, HV, K, V, window=L, device=DEV, backend=backend)
    idx = torch.tensor([1, 0], device=DEV)
    c.load_state(idx, S0[[1, 0]].to(DEV))
    for t in range(T):
        o = c.step(idx, *(None if x[n] is None else x[n][t][[1, 0]].to(DEV) for n in NAMES))[[1, 0]]
        assert _rel(o, o_alg[t]) < 1e-5, t
        assert _rel(c.checkpoint(idx)[[1, 0]], ck_alg[t]) < 1e-5, t
    assert _rel(o_alg, o_ref) > 1e-4                          # the bf16 read copy is in use


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_kernels_follow_algorithm_1(family, backend):
    """A shared bf16 checkpoint: the cache equals Algorithm 1 in float64 (one bf16 checkpoint, cached corrections)
    to fp32 rounding; the rounding error has entered the recurrence (the checkpoint drifts from the exact state)."""
    HV, K, V, L, T = 2, 32, 12, 4, 10
    x, S0 = _inputs(family, T, 1, HV, K, V, 7)
    o_alg, ck_alg = replay_decode(family, S0, *(x[n] for n in NAMES), window=L, recur=_rounder("bf16"))
    _, s_ref = oracle_sequence(family, S0, *(x[n] for n in NAMES))
    c = SSMStateCache(family, "bf16", 1, HV, K, V, window=L, device=DEV, backend=backend)
    idx = torch.tensor([0], device=DEV)
    c.load_state(idx, S0.to(DEV))
    for t in range(T):
        o = c.step(idx, *(None if x[n] is None else x[n][t].to(DEV) for n in NAMES))
        assert _rel(o, o_alg[t]) < 1e-5, t
    assert _rel(c.checkpoint(idx), ck_alg[-1]) < 1e-5
    assert _rel(ck_alg[7], s_ref[7]) > 1e-3
