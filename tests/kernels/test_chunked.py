"""Chunked teacher-forced windows (kernels/chunked.py) against the step path, identical inputs.

Two caches start from the same loaded state; one takes T tokens one :meth:`SSMStateCache.step` at a time,
the other one :func:`chunked_forward` call. Outputs agree up to fp32 reassociation, the rings hold the
same raw entries, and the flush is the step path's own code: where the flush does not use the cached
corrections (mamba2, separate specs) the checkpoints are bit-identical after every window; with them
(shared delta-rule specs, Algorithm 1) a cached correction off by an ulp may move a value across a
rounding threshold, counted here.
"""

import pytest
import torch

from replayssm_quant.kernels.chunked import chunked_forward, chunked_forward_many
from replayssm_quant.kernels.reference import cached_corrections
from replayssm_quant.kernels.state_cache import SSMStateCache

N_SLOTS, HV, K, V = 3, 2, 16, 8
SPECS = ("fp32", "bf16", "fp16+sr", "nvfp4+sr", "nvfp4/fp16", "nvfp4/fp8+sr")
RAW_RING = ("ring_g", "ring_k", "ring_v", "ring_beta", "ring_count", "flush_count")


def _inputs(family, T, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(N_SLOTS, T, HV, K, generator=g), dim=-1) * K ** -0.5
    k = torch.nn.functional.normalize(torch.randn(N_SLOTS, T, HV, K, generator=g), dim=-1)
    v = torch.randn(N_SLOTS, T, HV, V, generator=g)
    shape = (N_SLOTS, T, HV, K) if family == "kda" else (N_SLOTS, T, HV)
    dec = -torch.rand(*shape, generator=g) * 0.1
    beta = None if family == "mamba2" else torch.rand(N_SLOTS, T, HV, generator=g)
    S0 = torch.randn(N_SLOTS, HV, V, K, generator=g) * 0.5
    return q, k, v, dec, beta, S0


def _hp_codes(c):
    """Copies of the distinct stored tensors of both checkpoints (one set for a shared spec)."""
    out = []
    for t in c.hp.tensors() + c.lp.tensors():
        if not any(t is u for u in out):
            out.append(t)
    return [t.clone() for t in out]


@pytest.mark.parametrize("family", ["gdn", "kda", "mamba2"])
@pytest.mark.parametrize("spec", SPECS)
def test_chunked_equals_step(family, spec):
    L, T = 4, 11                                   # two flushes and a partial window (3 entries in the ring)
    q, k, v, g, beta, S0 = _inputs(family, T, seed=SPECS.index(spec) * 3 + len(family))
    step, chunk = (SSMStateCache(family, spec, N_SLOTS, HV, K, V, window=L, seed=5, backend="torch") for _ in "ab")
    slots = torch.arange(N_SLOTS)
    for c in (step, chunk):
        c.load_state(slots, S0)
    want, codes_step = [], []
    for t in range(T):
        want.append(step.step(slots, q[:, t], k[:, t], v[:, t], g[:, t], None if beta is None else beta[:, t]))
        if (t + 1) % L == 0:
            codes_step.append(_hp_codes(step))
    want = torch.stack(want, 1)
    got, codes_chunk = [], []
    for w0 in range(0, T, L):                      # one window per call, to compare the checkpoints per window
        sl = slice(w0, min(w0 + L, T))
        got.append(chunked_forward(chunk, slots, q[:, sl], k[:, sl], v[:, sl], g[:, sl],
                                   None if beta is None else beta[:, sl]))
        if sl.stop - sl.start == L:
            codes_chunk.append(_hp_codes(chunk))
    got = torch.cat(got, 1)
    assert got.shape == want.shape == (N_SLOTS, T, HV, V) and got.dtype == torch.float32
    # before the first flush both read the same loaded state: reassociation only
    err0 = ((got[:, :L - 1] - want[:, :L - 1]).abs().max() / want.abs().max()).item()
    assert err0 <= 2e-6, f"{family} {spec}: first-window outputs differ by {err0:.3g} (relative)"
    for name in RAW_RING:
        assert torch.equal(getattr(step, name), getattr(chunk, name)), f"{family} {spec}: {name} differs"
    assert torch.allclose(step.ring_u, chunk.ring_u, rtol=1e-5, atol=1e-6)
    exact_flush = family == "mamba2" or not cached_corrections(step)
    if spec == "fp32":
        for a, b in zip(codes_step[-1], codes_chunk[-1]):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    elif exact_flush:
        for w, (a, b) in enumerate(zip(codes_step, codes_chunk)):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), f"{family} {spec}: checkpoint differs after window {w}"
        err = ((got - want).abs().max() / want.abs().max()).item()
        assert err <= 2e-6, f"{family} {spec}: outputs differ by {err:.3g} (relative)"
    else:
        n_diff = sum(int((x != y).sum()) for x, y in zip(codes_step[-1], codes_chunk[-1]))
        total = codes_step[-1][0].numel()
        assert n_diff <= max(4, total // 200), f"{family} {spec}: {n_diff} of {total} stored codes differ"


def test_chunked_is_one_step_per_token_with_window_one():
    """Conventional decoding (window 1): every token is a flush through cache.step, bit-identical."""
    q, k, v, g, beta, S0 = _inputs("gdn", 5, seed=3)
    step, chunk = (SSMStateCache("gdn", "nvfp4+sr", N_SLOTS, HV, K, V, mode="conventional", seed=2, backend="torch")
                   for _ in "ab")
    slots = torch.arange(N_SLOTS)
    for c in (step, chunk):
        c.load_state(slots, S0)
    want = torch.stack([step.step(slots, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t]) for t in range(5)], 1)
    got = chunked_forward(chunk, slots, q, k, v, g, beta)
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(step.hp.tensors(), chunk.hp.tensors()))


@pytest.mark.parametrize("family", ["gdn", "kda", "mamba2"])
def test_many_caches_at_once_equal_one_at_a_time(family):
    """chunked_forward_many over a layer's caches (two windows, a conventional one, rows cache-major) = each cache
    alone through chunked_forward: outputs and every stored tensor, across two calls (a partial window between)."""
    kinds = [("fp32", "replay", 4), ("nvfp4/fp8+sr", "replay", 4), ("fp16+sr", "conventional", 4),
             ("nvfp4+sr", "replay", 2), ("bf16", "replay", 4)]
    n_c, T = len(kinds), 8

    def caches():
        return [SSMStateCache(family, spec, N_SLOTS, HV, K, V, window=L, mode=mode, seed=2, backend="torch")
                for spec, mode, L in kinds]
    alone, many = caches(), caches()
    slots = torch.arange(N_SLOTS)
    ins = [_inputs(family, T, seed=10 + i) for i in range(n_c)]
    for c in alone + many:
        c.load_state(slots, ins[0][5])
    cat = [None if ins[0][j] is None else torch.cat([x[j] for x in ins]) for j in range(5)]
    for sl in (slice(0, 4), slice(4, 8)):
        want = torch.cat([chunked_forward(c, slots, *(None if x is None else x[:, sl] for x in ins[i][:5]))
                          for i, c in enumerate(alone)])
        got = chunked_forward_many(many, slots, *(None if x is None else x[:, sl] for x in cat))
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for a, b in zip(alone, many):
        for (name, x), y in zip(a.stored_tensors().items(), b.stored_tensors().values()):
            assert torch.equal(x, y) or (x.is_floating_point() and torch.allclose(x, y, rtol=1e-6, atol=1e-6)), (
                f"{family} {a.spec.text} {a.mode}: {name} differs")


@pytest.mark.skipif(torch.cuda.is_available(), reason="bit-exact in the interpreter, where the torch reference "
                    "reduces in the kernels' order; on a GPU tests/eval/test_decode_graphs.py and the scale agreement run")
@pytest.mark.parametrize("family", ["gdn", "kda", "mamba2"])
def test_triton_backend_windows_equal_torch_backend(family):
    """The windows of triton-backend caches (read copies decoded by the Triton dequantizers, flushes by the Triton
    step: what a GPU runs) = those of torch-backend caches, bit for bit: outputs and every stored tensor."""
    kinds = [("nvfp4/fp8+sr", "replay"), ("fp8/fp16", "replay"), ("int8+sr", "conventional")]
    T = 6

    def caches(backend):
        return [SSMStateCache(family, spec, N_SLOTS, HV, K, V, window=4, mode=mode, seed=2, backend=backend)
                for spec, mode in kinds]
    ref, tri = caches("torch"), caches("triton")
    slots = torch.arange(N_SLOTS)
    q, k, v, g, beta, S0 = _inputs(family, T, seed=31)
    for c in ref + tri:
        c.load_state(slots, S0)
    ins = [x if x is None else torch.cat([x] * len(kinds)) for x in (q, k, v, g, beta)]
    for sl in (slice(0, 4), slice(4, 6)):                  # a whole window (3 reads + flush), then a partial one
        want = chunked_forward_many(ref, slots, *(None if x is None else x[:, sl] for x in ins))
        got = chunked_forward_many(tri, slots, *(None if x is None else x[:, sl] for x in ins))
        assert torch.equal(got, want), f"{family}: outputs differ by up to {(got - want).abs().max().item():.3g}"
    for a, b in zip(ref, tri):
        for (name, x), y in zip(a.stored_tensors().items(), b.stored_tensors().values()):
            assert torch.equal(x, y), f"{family} {a.spec.text}: {name} differs"
