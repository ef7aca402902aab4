"""Shared keys (``SSMStateCache(num_key_heads=HK < HV)``): the ring keeps one key per key head and the kernels read
value head h's key from key head ``h // (HV / HK)``. A cache with shared keys must give the same bits as a cache
with one key per value head fed the repeated keys: outputs, checkpoints, read copies and every ring tensor (its
keys are the other's, one per group), for the torch reference and the Triton kernels (fused grid, split step,
nvfp4 sub-block items), aligned and staggered flushes.
"""

import pytest
import torch

from replayssm_quant.kernels.launch import LaunchKnobs
from replayssm_quant.kernels.state_cache import SSMStateCache

HV, HK, K, V, L, SLOTS = 4, 2, 32, 16, 4, 4


def _inputs(family: str, steps: int, B: int, seed: int, hv: int = HV, hk: int = HK, v_dim: int = V):
    """Per step (q, k per key head, v, g, beta), random, k L2-normalised."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        q = torch.randn(B, hv, K, generator=gen)
        k = torch.nn.functional.normalize(torch.randn(B, hk, K, generator=gen), dim=-1)
        v = torch.randn(B, hv, v_dim, generator=gen)
        g = -0.3 * torch.rand(*((B, hv, K) if family == "kda" else (B, hv)), generator=gen)
        beta = None if family == "mamba2" else torch.rand(B, hv, generator=gen)
        out.append((q, k, v, g, beta))
    return out


def _run(family, spec, backend, num_key_heads, knobs=None, seed=0, hv=HV, hk=HK, v_dim=V):
    """Two steps of slot 2 alone (its ring ahead of the others: staggered flushes), then 9 steps of slots 2, 0, 3
    (window 4: slot 2 flushes alone, slots 0 and 3 together, on other steps). ``num_key_heads`` = ``hk``: the
    inputs' keys per key head; = ``hv``: repeated per value head. Returns the cache and the outputs."""
    cache = SSMStateCache(family, spec, SLOTS, hv, K, v_dim, window=L, backend=backend, seed=5, knobs=knobs,
                          num_key_heads=num_key_heads)
    outs = []
    for t, (q, k, v, g, beta) in enumerate(_inputs(family, 11, 3, seed, hv, hk, v_dim)):
        rows = slice(0, 1) if t < 2 else slice(0, 3)
        slots = torch.tensor([2, 0, 3], dtype=torch.int32)[rows]
        if num_key_heads != hk:
            k = k.repeat_interleave(hv // hk, dim=1)
        sel = (lambda x: None if x is None else x[rows].contiguous())
        outs.append(cache.step(slots, sel(q), sel(k), sel(v), sel(g), sel(beta)))
    return cache, outs


def _assert_same_bits(a, b, what):
    assert a.shape == b.shape and a.dtype == b.dtype, what
    if a.dtype.is_floating_point:   # the bits, so NaNs and signed zeros count
        bits = {4: torch.int32, 2: torch.int16, 1: torch.uint8}[a.element_size()]
        a, b = a.view(bits), b.view(bits)
    assert torch.equal(a, b), f"{what}: {(a != b).sum().item()} elements differ"


def _assert_caches_match(shared, own, outs_shared, outs_own):
    for t, (a, b) in enumerate(zip(outs_shared, outs_own)):
        _assert_same_bits(a, b, f"output of step {t}")
    ts, to = shared.stored_tensors(), own.stored_tensors()
    assert set(ts) == set(to)
    for name in ts:
        a, b = ts[name], to[name]
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        if name == "ring_k":   # one key per key head: the value heads' copies of a group are equal
            assert a.shape[1] == HK and b.shape[1] == HV
            b = b[:, ::HV // HK]
            _assert_same_bits(own.ring_k[:, 1::HV // HK], own.ring_k[:, ::HV // HK], "the repeated keys' ring")
        _assert_same_bits(a, b, name)


FAMILY_SPECS = [("gdn", "fp32"), ("gdn", "nvfp4/fp16"), ("gdn", "fp8+sr"), ("kda", "nvfp4/fp8+sr"),
                ("kda", "fp32"), ("mamba2", "fp32"), ("mamba2", "nvfp4/fp16"), ("mamba2", "int8+sr")]


def _assert_same_run(a, outs_a, b, outs_b, what):
    for t, (x, y) in enumerate(zip(outs_a, outs_b)):
        _assert_same_bits(x, y, f"{what} output of step {t}")
    for name, x in a.stored_tensors().items():
        if x is not None:
            _assert_same_bits(x, b.stored_tensors()[name], f"{what} {name}")


@pytest.mark.parametrize("family,spec", FAMILY_SPECS)
def test_shared_keys_torch_reference_equals_repeated_keys(family, spec):
    shared, o1 = _run(family, spec, "torch", HK)
    own, o2 = _run(family, spec, "torch", HV)
    _assert_caches_match(shared, own, o1, o2)
    assert shared.ring_k.numel() * (HV // HK) == own.ring_k.numel()


# Triton with shared keys against the torch reference with shared keys (which equals repeated keys, above; Triton
# with a key per value head equals the reference in tests/kernels/test_decode.py)
@pytest.mark.parametrize("split", [False, True], ids=["fused", "split"])
@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp16"), ("gdn", "fp8+sr"), ("kda", "nvfp4/fp8+sr"),
                                         ("mamba2", "fp32"), ("mamba2", "nvfp4/fp16")])
def test_shared_keys_triton_equals_reference(family, spec, split):
    shared, o1 = _run(family, spec, "triton", HK, LaunchKnobs(split_flush=split))
    ref, o2 = _run(family, spec, "torch", HK)
    _assert_same_run(shared, o1, ref, o2, "triton vs torch")


@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp16"), ("mamba2", "nvfp4/fp8+sr")])
def test_shared_keys_nvfp4_sub_block_items(family, spec):
    """Few flush rows of an nvfp4 checkpoint (two value heads sharing one key; V = 40: three 16-row sub-blocks): with
    one flush row (slot 2) its 2 pairs fill half of the interpreter's 4 flush programs, so pass 1 runs in sub-block
    items (:mod:`.nvfp4_items`); with two (slots 0 and 3) whole-head items. Bit for bit the torch reference."""
    from replayssm_quant.kernels.launch import plan_step

    knobs = LaunchKnobs(split_flush=True, flush_nvfp4_items=True, block_v=16, flush_block_v=16)
    shared, o1 = _run(family, spec, "triton", 1, knobs, seed=1, hv=2, hk=1, v_dim=40)
    assert plan_step(shared, 3).flush.nvfp4_items
    ref, o2 = _run(family, spec, "torch", 1, seed=1, hv=2, hk=1, v_dim=40)
    _assert_same_run(shared, o1, ref, o2, "nvfp4 items vs torch")


@pytest.mark.parametrize("spread", [True, False], ids=["spread", "head_program"])
def test_shared_keys_fused_two_pass_nvfp4_flush(spread):
    """The fused grid's two-pass nvfp4 flush (V = 40 in 16-row programs: three V-block programs per head) spread over
    the head's programs or in its first one, two value heads sharing one key. Bit for bit the torch reference."""
    knobs = LaunchKnobs(split_flush=False, block_v=16, flush_block_v=16, fused_nvfp4_spread=spread)
    shared, o1 = _run("gdn", "nvfp4/fp16", "triton", 1, knobs, seed=2, hv=2, hk=1, v_dim=40)
    ref, o2 = _run("gdn", "nvfp4/fp16", "torch", 1, seed=2, hv=2, hk=1, v_dim=40)
    _assert_same_run(shared, o1, ref, o2, "fused two-pass vs torch")


def test_shared_keys_conventional_mode():
    c1 = SSMStateCache("gdn", "fp32", SLOTS, HV, K, V, mode="conventional", backend="triton", num_key_heads=HK)
    c2 = SSMStateCache("gdn", "fp32", SLOTS, HV, K, V, mode="conventional", backend="torch")
    slots = torch.tensor([1, 3], dtype=torch.int32)
    for q, k, v, g, beta in _inputs("gdn", 3, 2, 7):
        a = c1.step(slots, q, k, v, g, beta)
        b = c2.step(slots, q, k.repeat_interleave(HV // HK, dim=1), v, g, beta)
        _assert_same_bits(a, b, "conventional output")
    _assert_same_bits(c1.checkpoint(slots), c2.checkpoint(slots), "conventional checkpoint")


def test_shared_keys_errors():
    with pytest.raises(ValueError, match=r"num_key_heads=3 must divide num_heads=4"):
        SSMStateCache("gdn", "fp32", 2, 4, K, V, backend="torch", num_key_heads=3)
    with pytest.raises(ValueError, match=r"num_key_heads must be a positive int"):
        SSMStateCache("gdn", "fp32", 2, 4, K, V, backend="torch", num_key_heads=0)
    c = SSMStateCache("gdn", "fp32", 2, 4, K, V, backend="torch", num_key_heads=2, max_draft=2)
    q, k, v, g, beta = _inputs("gdn", 1, 1, 0)[0]
    with pytest.raises(ValueError, match=r"k has shape \(1, 4, 32\), expected \(1, 2, 32\) \(k per key head: this "
                                         r"cache has num_key_heads=2"):
        c.step(torch.tensor([0]), q, k.repeat_interleave(2, dim=1), v, g, beta)
    with pytest.raises(ValueError, match=r"k has shape \(1, 1, 4, 32\), expected \(1, 1, 2, 32\) \(k per key head"):
        c.verify(torch.tensor([0]), *(None if x is None else x[:, None] for x in
                                      (q, k.repeat_interleave(2, dim=1), v, g, beta)))
    from replayssm_quant.kernels.chunked import chunked_forward, chunked_forward_many
    with pytest.raises(ValueError, match=r"chunked_forward: k must be \[R, T, HK, K\] with HK = num_key_heads = 2"):
        chunked_forward(c, torch.tensor([0]), q[:, None], k.repeat_interleave(2, dim=1)[:, None], v[:, None],
                        g[:, None], beta[:, None])
    own = SSMStateCache("gdn", "fp32", 2, 4, K, V, backend="torch")
    with pytest.raises(ValueError, match=r"the same num_key_heads, got \[2, 4\]"):
        chunked_forward_many([c, own], torch.tensor([0]), *(torch.cat([x[:, None]] * 2) for x in (q, k, v, g, beta)))


@pytest.mark.parametrize("family,specs", [("gdn", ("fp32", "nvfp4/fp16")), ("mamba2", ("nvfp4+sr", "fp8+sr")),
                                          ("gdn", ("fp16+sr", "conventional:fp32"))])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_shared_keys_chunked_windows(family, specs, backend):
    """Teacher-forced windows (``chunked_forward_many``, the harness's chunked evaluation) of caches with shared keys:
    the same outputs and stored tensors as caches with a key per value head fed the repeated keys, over two whole
    windows and a partial one (the rings filled from the windows, then flushed by a step), two caches at once."""
    from replayssm_quant.eval.decode import parse_variant
    from replayssm_quant.kernels.chunked import chunked_forward_many

    T, n = 2 * L + 2, 2
    steps = _inputs(family, T, len(specs) * n, seed=11)
    q, k, v, g = (torch.stack([s[i] for s in steps], 1) for i in range(4))             # [R, T, H*, *]
    beta = None if family == "mamba2" else torch.stack([s[4] for s in steps], 1)
    slots = torch.tensor([3, 1])
    runs = []
    for hk in (HK, HV):
        caches = []
        for text in specs:
            var = parse_variant(text)
            caches.append(SSMStateCache(family, var.spec, SLOTS, HV, K, V, window=var.window or L, mode=var.mode,
                                        backend=backend, seed=5, num_key_heads=hk))
        kk = k if hk == HK else k.repeat_interleave(HV // HK, dim=2)
        runs.append((caches, chunked_forward_many(caches, slots, q, kk, v, g, beta)))
    (shared, out_shared), (own, out_own) = runs
    _assert_same_bits(out_shared, out_own, "window outputs")
    for cs, co in zip(shared, own):
        ts, to = cs.stored_tensors(), co.stored_tensors()
        for name in ts:
            want = to[name][:, ::HV // HK] if name == "ring_k" else to[name]
            _assert_same_bits(ts[name], want, name)


SPEC_CASES = [("gdn", "fp32", "replay"), ("gdn", "nvfp4/fp16+sr", "replay"), ("gdn", "fp8+sr", "replay"),
              ("kda", "nvfp4/fp8+sr", "replay"), ("mamba2", "nvfp4/fp16", "replay"), ("mamba2", "fp32", "replay"),
              ("gdn", "int8+sr", "conventional"), ("mamba2", "fp8+sr", "conventional")]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("family,spec,mode", SPEC_CASES)
def test_shared_keys_speculative_verify_and_commit(family, spec, mode, backend):
    """Speculative decoding with shared keys (``max_draft`` 3, window 4): verify rounds of a random 1..3 tokens with
    random accepted counts (a padded row in every launch; commits that flush and re-verify the committed tail),
    a plain step every fourth round. Outputs and every stored tensor (ring, draft buffers, snapshots, counters)
    are bit for bit those of a cache with a key per value head fed the repeated keys, separate specs (the tail
    verify's queries are the keys, per value head) and shared ones with cached corrections included."""
    _speculative_rounds(family, spec, mode, backend)


@pytest.mark.parametrize("family", ["gdn", "mamba2"])
def test_shared_keys_speculative_verify_split_over_programs(family):
    """The same with V = 40 in 16-row blocks over two verify programs per head (only the first appends the keys;
    a masked tail block)."""
    _speculative_rounds(family, "fp32", "replay", "triton", LaunchKnobs(block_v=16, verify_split=2), 40)


def _speculative_rounds(family, spec, mode, backend, knobs=None, v_dim=V):
    gen = torch.Generator().manual_seed(31)
    caches = {hk: SSMStateCache(family, spec, SLOTS, HV, K, v_dim, window=L, mode=mode, backend=backend, seed=5,
                                max_draft=3, num_key_heads=hk, knobs=knobs) for hk in (HK, HV)}
    S0 = torch.randn(SLOTS, HV, v_dim, K, generator=gen) * 0.3
    for c in caches.values():
        c.load_state(torch.arange(SLOTS), S0)
    idx = torch.tensor([2, -1, 0])
    flushes = caches[HK].flush_count[:SLOTS].clone()
    for r in range(9):
        T = 1 if r % 4 == 3 else int(torch.randint(1, 4, (1,), generator=gen))
        steps = _inputs(family, T, len(idx), seed=100 + r, v_dim=v_dim)
        x = [None if steps[0][i] is None else torch.stack([s[i] for s in steps], 1) for i in range(5)]
        rep = lambda k, c: k if c.key_group > 1 else k.repeat_interleave(HV // HK, dim=-2)   # noqa: E731
        if r % 4 == 3:   # a plain step
            outs = {hk: c.step(idx, x[0][:, 0], rep(x[1][:, 0], c), x[2][:, 0], x[3][:, 0],
                               None if x[4] is None else x[4][:, 0]) for hk, c in caches.items()}
        else:
            outs = {hk: c.verify(idx, x[0], rep(x[1], c), *x[2:]) for hk, c in caches.items()}
            acc = torch.randint(1, T + 1, (len(idx),), generator=gen, dtype=torch.int32)
            for c in caches.values():
                c.commit(idx, acc)
        _assert_same_bits(outs[HK], outs[HV], f"round {r} outputs")
        _assert_caches_match(caches[HK], caches[HV], [], [])
    if mode == "replay":   # the rounds crossed flushes (commits that reach the window's L-th token)
        assert bool((caches[HK].flush_count[:SLOTS][[0, 2]] >= flushes[[0, 2]] + 2).all())
