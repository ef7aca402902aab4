"""Decode kernels and SSMStateCache: against the float64 oracle and the torch algorithm references.

Runs the Triton kernel in the CPU interpreter (TRITON_INTERPRET=1) when there is
no GPU. Small odd shapes (masked tails in K and V), fresh random inputs per
test, NaN-poisoned outputs, padded rows, slots at different ring positions in
one launch (continuous batching).
"""

import os
import zlib

import pytest
import torch
import triton
import triton.language as tl

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels import SSMStateCache, oracle_sequence  # noqa: E402
from replayssm_quant.kernels.flush_math import _tf32_split  # noqa: E402
from replayssm_quant.kernels import fused as fused_mod  # noqa: E402
from replayssm_quant.kernels.launch import LaunchKnobs, plan_step  # noqa: E402
from replayssm_quant.kernels.inputs import random_decode_inputs  # noqa: E402
from replayssm_quant.kernels.storage import sr_rbits  # noqa: E402
from replayssm_quant.quant import reference as qref  # noqa: E402
from replayssm_quant.quant.reference import round_to_format  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FAMILIES = ["mamba2", "gdn", "kda"]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _seed(*key) -> int:
    """A seed in [0, 1000) fixed by ``key``: not Python's ``hash``, which is salted per process, so that a failing
    case reproduces."""
    return zlib.crc32(repr(key).encode()) % 1000


def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _cache(family, spec, HV, K, V, backend, mode="replay", L=4, slots=6, seed=0, block_v=None, flush_block_v=4,
           ring_dtype=torch.float32, **knobs):
    """A cache with launcher knobs (:class:`LaunchKnobs`): by default flushes in sub-blocks of 4 rows (several per
    tile); ``split_flush``: two launches (non-flush rows, flush rows) or one fused."""
    return SSMStateCache(family, spec, num_slots=slots, num_heads=HV, head_k=K, head_v=V, window=L, mode=mode,
                         seed=seed, device=DEV, backend=backend, ring_dtype=ring_dtype,
                         knobs=LaunchKnobs(block_v=block_v, flush_block_v=flush_block_v, **knobs))


def _step(c, idx, x, t, poison=True):
    B = idx.numel()
    out = torch.full((B, c.num_heads, c.head_v), float("nan"), device=DEV) if poison else None
    return c.step(idx.to(DEV), x["q"][t], x["k"][t], x["v"][t], x["g"][t],
                  None if x["beta"] is None else x["beta"][t], out=out)


RING_ENTRIES = ("ring_g", "ring_k", "ring_v", "ring_beta", "ring_u")   # SSMStateCache.stored_tensors' ring entries


def _ring_tensors(c):
    """The cache's ring entry tensors (mamba2: ``ring_u`` is ``ring_v``)."""
    st = c.stored_tensors()
    return [st[name] for name in RING_ENTRIES]


def _assert_stored_match(ref, got):
    """A stored tensor of the Triton cache against the torch reference's: bit for bit in the interpreter (which
    computes in the reference's order). On a GPU the kernels contract products into fmas, so fp32 states differ
    from torch's in the last ulp and an occasional rounding decision flips: float tensors within 1e-5 of their
    largest element (fp16 / bf16 codes: one ulp of it),
    code and counter tensors equal in all but 1% of their elements (counters: all)."""
    if DEV == "cpu" or ref.numel() == 0:
        assert torch.equal(ref, got)
    elif ref.is_floating_point():
        fin = torch.isfinite(ref)
        tol = 1e-5 if ref.dtype == torch.float32 else torch.finfo(ref.dtype).eps   # a flipped fp16/bf16 rounding
        assert torch.equal(fin, torch.isfinite(got)) and _rel(got[fin], ref[fin]) <= tol
    elif ref.dtype == torch.int32 and ref.dim() == 1:
        assert torch.equal(ref, got)
    else:
        assert (ref != got).float().mean().item() <= 0.01


def _all_tensors(c, with_u=True):
    """Every stored tensor of the cache (:meth:`SSMStateCache.stored_tensors`: checkpoints, ring, counters;
    padded-row scratch excluded), cloned. The cached corrections ``ring_u`` only at the live entries (j < ring
    count): a two-pass nvfp4 flush of a separate spec parks its recomputed corrections in the slots that the flush
    empties, which the reference does not; dead entries are never read (the next appends overwrite them first)."""
    st = c.stored_tensors()
    ts = [t for name, t in st.items() if name not in ("ring_u", "ring_count", "flush_count")]
    ts += [st["ring_count"][:-1], st["flush_count"][:-1]]
    if with_u:
        live = torch.arange(c.ring_u.shape[2], device=c.ring_u.device) < c.ring_count[:-1, None]   # [S, L1]
        ts.append(torch.where(live[:, None, :, None], st["ring_u"], 0.0))
    return [t.clone() for t in ts]


# --------------------------------------------------------------------------------------------
# fp32 replay / conventional against the float64 oracle
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_replay_equals_oracle(family, backend):
    HV, K, V, L, T = 3, 20, 13, 4, 13              # 3 flushes + 1 step; K, V not powers of two
    x = random_decode_inputs(family, T, 3, HV, K, V, generator=_gen(1), device=DEV)
    S0 = torch.randn(2, HV, V, K, generator=_gen(2)).to(DEV) * 0.5
    c = _cache(family, "fp32", HV, K, V, backend, L=L, block_v=8 if backend == "triton" else None)
    slots = torch.tensor([5, 1], device=DEV)
    c.load_state(slots, S0)
    idx = torch.tensor([5, -1, 1], device=DEV)     # a padded row in the middle
    o_ref, s_ref = oracle_sequence(family, S0.cpu(), *(x[n][:, [0, 2]].cpu() if x[n] is not None else None
                                                        for n in ("q", "k", "v", "g", "beta")))
    for t in range(T):
        o = _step(c, idx, x, t).cpu()
        assert _rel(o[[0, 2]], o_ref[t]) < 1e-5, (t, _rel(o[[0, 2]], o_ref[t]))
        assert torch.all(o[1] == 0)
        assert _rel(c.state(slots).cpu(), s_ref[t]) < 1e-5
        if (t + 1) % L == 0:                        # a flush committed S_t
            assert _rel(c.checkpoint(slots).cpu(), s_ref[t]) < 1e-5
            assert torch.all(c.ring_count[slots] == 0)
        else:
            assert torch.all(c.ring_count[slots] == (t + 1) % L)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_replay_strong_decays_equal_oracle(family, split):
    """Log decays down to -12 per step (the ring's cumulative log decay reaches about -100 before a flush): the
    decays exp(G_t - G_j) from the cumulative ring entries still keep outputs and states within 1e-5 of the
    float64 oracle (fused and split launches; runs on the GPU too)."""
    HV, K, V, L, T = 2, 16, 9, 16, 35
    x = random_decode_inputs(family, T, 1, HV, K, V, generator=_gen(5), device=DEV, decay_scale=12.0)
    S0 = torch.randn(1, HV, V, K, generator=_gen(6)).to(DEV)
    c = _cache(family, "fp32", HV, K, V, "triton", L=L, slots=2, split_flush=split)
    slot = torch.tensor([1], device=DEV)
    c.load_state(slot, S0)
    o_ref, s_ref = oracle_sequence(family, S0.cpu(), *(None if x[n] is None else x[n].cpu()
                                                        for n in ("q", "k", "v", "g", "beta")))
    assert x["g"].min() < -11
    for t in range(T):
        o = _step(c, slot, x, t).cpu()
        assert _rel(o, o_ref[t]) < 1e-5, (t, _rel(o, o_ref[t]))
        if t == L - 2:   # a full ring: its last entry is the cumulative log decay since the checkpoint
            G = x["g"][:L - 1, 0].double().sum(0)
            assert torch.allclose(c.ring_g[1, :, L - 2].cpu().double().squeeze(-1), G.cpu().squeeze(-1), rtol=1e-6)
    assert _rel(c.state(slot).cpu(), s_ref[T - 1]) < 1e-5


@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_fp32_replay_window16_equals_oracle(family):
    HV, K, V, L, T = 2, 16, 9, 16, 35
    x = random_decode_inputs(family, T, 1, HV, K, V, generator=_gen(3), device=DEV)
    S0 = torch.randn(1, HV, V, K, generator=_gen(4)).to(DEV)
    c = _cache(family, "fp32", HV, K, V, "triton", L=L, slots=2)
    slot = torch.tensor([1], device=DEV)
    c.load_state(slot, S0)
    o_ref, s_ref = oracle_sequence(family, S0.cpu(), *(None if x[n] is None else x[n].cpu()
                                                        for n in ("q", "k", "v", "g", "beta")))
    for t in range(T):
        o = _step(c, slot, x, t).cpu()
        assert _rel(o, o_ref[t]) < 1e-5, t
    assert _rel(c.checkpoint(slot).cpu(), s_ref[31]) < 1e-5
    assert _rel(c.state(slot).cpu(), s_ref[T - 1]) < 1e-5


@pytest.mark.parametrize("family", FAMILIES)
def test_conventional_fp32_equals_oracle(family):
    HV, K, V, T = 2, 24, 11, 6
    x = random_decode_inputs(family, T, 2, HV, K, V, generator=_gen(5), device=DEV)
    S0 = torch.randn(2, HV, V, K, generator=_gen(6)).to(DEV)
    c = _cache(family, "fp32", HV, K, V, "triton", mode="conventional", slots=3)
    slots = torch.tensor([2, 0], device=DEV)
    c.load_state(slots, S0)
    o_ref, s_ref = oracle_sequence(family, S0.cpu(), *(None if x[n] is None else x[n].cpu()
                                                        for n in ("q", "k", "v", "g", "beta")))
    for t in range(T):
        o = _step(c, slots, x, t).cpu()
        assert _rel(o, o_ref[t]) < 1e-5
        assert _rel(c.checkpoint(slots).cpu(), s_ref[t]) < 1e-5


# --------------------------------------------------------------------------------------------
# Triton kernel == torch algorithm reference, bit for bit on every stored tensor
# --------------------------------------------------------------------------------------------

CASES = [  # (family, spec, mode, block_v)
    ("gdn", "fp32", "replay", 8), ("gdn", "bf16", "replay", None), ("gdn", "fp16+sr", "replay", 8),
    ("gdn", "e4m3+sr", "replay", None), ("gdn", "e5m2", "replay", 16), ("gdn", "nvfp4+sr", "replay", None),
    ("gdn", "nvfp4/fp16", "replay", 8), ("gdn", "nvfp4/e4m3+sr", "replay", None),
    ("gdn", "e4m3/fp32", "replay", 8), ("gdn", "fp32", "conventional", 8),
    ("gdn", "e4m3+sr", "conventional", None), ("gdn", "nvfp4+sr", "conventional", None),
    ("kda", "fp32", "replay", 8), ("kda", "bf16/fp16+sr", "replay", 16), ("kda", "nvfp4/e4m3+sr", "replay", None),
    ("kda", "fp16", "conventional", None), ("kda", "nvfp4+sr", "conventional", 8),
    ("mamba2", "fp32", "replay", 8), ("mamba2", "e4m3+sr", "replay", None),
    ("mamba2", "nvfp4/fp16", "replay", 8), ("mamba2", "nvfp4+sr", "replay", 16), ("mamba2", "bf16+sr", "conventional", 8),
    # default flush sub-block (16 >= V): nvfp4 flushes the whole head in one pass
    ("gdn", "nvfp4+sr", "conventional", "default"), ("kda", "nvfp4/fp16", "replay", "default"),
]


#: replay cases fused and split; conventional ignores the split knob (every step is a flush), so it runs once
SPLIT_CASES = [pytest.param(*c, split, id=f"{'-'.join(map(str, c))}-{'split' if split else 'fused'}")
               for c in CASES for split in ((False, True) if c[2] == "replay" else (False,))]


@pytest.mark.parametrize("family,spec,mode,block_v,split", SPLIT_CASES)
def test_triton_bit_exact_vs_torch(family, spec, mode, block_v, split):
    """split: the replay step as two launches (non-flush rows, then flush rows; forced: the heuristic only
    splits large GPU grids)."""
    _check_bit_exact(family, spec, mode, block_v, split, resync=DEV != "cpu")


@pytest.mark.parametrize("family,spec,block_v,V", [("gdn", "fp32", 8, 40), ("kda", "e4m3+sr", 4, 40),
                                                    ("mamba2", "fp16+sr", 8, 40), ("gdn", "e4m3/fp32", 8, 24)])
def test_fused_replay_flush_in_groups_of_programs_bit_exact(family, spec, block_v, V):
    """Replay programs of fewer rows than the flush's 16-row sub-block (``block_v`` 8 or 4) flush in groups: the
    group's first program flushes the sub-block's rows, the others none. V = 40 in 8-row programs: groups (0, 1),
    (2, 3) and program 4 alone, its rows 40-47 masked; in 4-row programs, groups of four; V = 24: a group's second
    program missing (rows 24-31 masked). Bit for bit the torch reference over the schedule of the test above."""
    _check_bit_exact(family, spec, "replay", block_v, False, resync=DEV != "cpu", V=V)


@pytest.mark.parametrize("family,spec,mode,block_v,V", [("gdn", "nvfp4/fp16", "replay", 16, 40),
                                                       ("gdn", "nvfp4/fp16", "replay", 8, 40),
                                                       ("kda", "nvfp4/e4m3+sr", "replay", 32, 40),
                                                       ("mamba2", "nvfp4+sr", "replay", 32, 40),
                                                       ("gdn", "nvfp4+sr", "conventional", 8, 13),
                                                       ("mamba2", "nvfp4/fp16", "replay", 64, 40)])
def test_fused_nvfp4_flush_spread_bit_exact(family, spec, mode, block_v, V, monkeypatch):
    """The fused grid's two-pass nvfp4 flush spread over the head's V-block programs (knob ``fused_nvfp4_spread``),
    the last program to arrive encoding the head. Replay flushes in 16-row sub-blocks: V = 40 in 16-row programs
    (three, one sub-block each), in 32-row ones (two sub-blocks each; the second program's rows 40-47 masked and
    48-63 past the scratch) and in one 64-row program (the whole head); conventional V = 13 in 4-row sub-blocks of
    8-row programs. Bit for bit the torch reference over the schedule of permuted, padded rows of the test above.
    The launch's scratch and amaxes come poisoned (NaN), so a head encoded before all its rows and amaxes are in
    shows."""
    real_empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(fused_mod.torch, "empty", poisoned_empty)
    _check_bit_exact(family, spec, mode, block_v, False, resync=DEV != "cpu", V=V, fused_nvfp4_spread=True,
                     flush_block_v=None if mode == "replay" else 4)


def test_spread_flush_arrival_counts_are_kept_per_batch_size_and_left_zero():
    """The spread flush's per-(row, head) arrival counts (``SSMStateCache.head_arrivals``) are one buffer per batch
    size, the same tensor on every step (zeroed once: no memset per step; a captured graph keeps its address),
    and the step's last programs leave them zero (``arrivals_clear``; a count left over is seen). A spread plan
    launched without them is refused."""
    HV, K, V = 2, 32, 40
    c = _cache("gdn", "nvfp4/fp16", HV, K, V, "triton", L=2, slots=3, seed=1, block_v=16, flush_block_v=16,
               fused_nvfp4_spread=True)
    x = random_decode_inputs("gdn", 4, 2, HV, K, V, generator=_gen(5), device=DEV)
    idx = torch.tensor([1, 0])
    assert plan_step(c, 2).nvfp4_spread
    buf = c.head_arrivals(2)
    assert buf.shape == (2 * HV,) and buf.dtype == torch.int32
    for t in range(4):   # L = 2: a flush on every other step
        _step(c, idx, x, t)
        assert c.head_arrivals(2) is buf and c.arrivals_clear(), t
    assert int(c.flush_count[:2].min()) == 2
    assert c.head_arrivals(1) is not buf and c.head_arrivals(1).shape == (HV,)
    buf[3] = 1
    assert not c.arrivals_clear()
    buf[3] = 0
    from replayssm_quant.kernels.decode import step_args, step_plan_consts

    plan, consts = step_plan_consts(c, 2)
    args = step_args(c, idx.to(DEV), *(x[n][0] for n in ("q", "k", "v", "g", "beta")), None)
    with pytest.raises(ValueError, match="head_arrivals"):
        fused_mod.launch_fused(plan, args, consts, 2, c.device)


def test_spread_flush_arrival_counts_are_not_first_made_in_a_graph_capture(monkeypatch):
    """A batch size's arrival counts are zeroed when first made; made inside a CUDA-graph capture that zeroing
    would not run until the graph's first replay, so a capture as a batch size's first step is refused with what
    to do (the buffer of a batch size stepped eagerly before is reused inside a capture)."""
    c = _cache("gdn", "nvfp4/fp16", 2, 32, 40, "triton", L=2, slots=3, block_v=16, flush_block_v=16)
    warm = c.head_arrivals(2)
    monkeypatch.setattr(c, "device", torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert c.head_arrivals(2) is warm
    with pytest.raises(RuntimeError, match="run one eager step of this batch size first"):
        c.head_arrivals(1)


@pytest.mark.parametrize("family,spec,mode", [("gdn", "nvfp4+sr", "conventional"), ("mamba2", "nvfp4/fp16", "replay"),
                                              ("kda", "nvfp4/e4m3+sr", "replay")])
def test_bit_exact_check_resyncs_in_the_interpreter(family, spec, mode):
    """The GPU-only branch of the bit-exactness check (the Triton cache set to the reference's state after each
    step) run in the interpreter, where it changes nothing: a bug in it would otherwise first show on a GPU."""
    _check_bit_exact(family, spec, mode, None, mode == "replay", resync=True)


def _check_bit_exact(family, spec, mode, block_v, split, resync, V=13, **knobs):
    """The torch and Triton caches stepped side by side over a schedule of permuted, padded rows at different ring
    positions, compared after every step (:func:`_assert_stored_match`). ``resync``: after each step's check, copy
    the reference's stored tensors into the Triton cache (where the recurrence checkpoint is lossy), so that one
    rounding flipped by an fma on a GPU does not move every later step."""
    HV, K, L = 2, 48, 4
    x = random_decode_inputs(family, 9, 4, HV, K, V, generator=_gen(_seed(family, spec, mode)),
                             device=DEV)
    S0 = torch.randn(3, HV, V, K, generator=_gen(7)).to(DEV)
    kw = dict(flush_block_v=None) if block_v == "default" else dict(block_v=block_v)
    kw["split_flush"] = split
    kw.update(knobs)
    cs = [_cache(family, spec, HV, K, V, b, mode=mode, L=L, seed=11, **kw) for b in ("torch", "triton")]
    for c in cs:
        c.load_state(torch.tensor([4, 0], device=DEV), S0[:2])
    # slots at different ring positions in one launch; rows permuted; one padded row
    schedule = [torch.tensor([4, -1, 0, -1]), torch.tensor([0, 4, -1, -1]), "load",
                torch.tensor([1, 0, -1, 4]), torch.tensor([4, 1, 0, -1]), torch.tensor([-1, 0, 4, 1]),
                torch.tensor([1, -1, 4, 0]), torch.tensor([0, 1, 4, -1])]
    t = 0
    for item in schedule:
        if isinstance(item, str):
            for c in cs:
                c.load_state(torch.tensor([1], device=DEV), S0[2:])
            continue
        outs = [_step(c, item, x, t) for c in cs]
        t += 1
        assert not torch.isnan(outs[1]).any()
        assert cs[1].arrivals_clear(), t   # every arrival count back at zero (a spread flush's too)
        # on a GPU an fma-flipped rounding of a low-precision state moves the outputs that read it (_assert_stored_match)
        assert _rel(outs[1], outs[0]) <= (1e-5 if DEV == "cpu" or cs[0].spec.read.name == "fp32" else 1e-3)
        assert torch.all(outs[1][item.to(DEV) < 0] == 0)
        # checkpoints, ring inputs, the cached corrections u_j (a shared spec's flush uses them) and
        # counters bit for bit (in the interpreter; on a GPU, see _assert_stored_match)
        for a, b in zip(_all_tensors(cs[0]), _all_tensors(cs[1])):
            _assert_stored_match(a, b)
        if resync and cs[0].spec.recur.name != "fp32":
            # on a GPU a flipped rounding of a lossy recurrence checkpoint re-enters the recurrence, and the two
            # caches drift apart by design: each step is checked from the reference's state
            got = cs[1].stored_tensors()
            for name, ref in cs[0].stored_tensors().items():
                got[name].copy_(ref)
    assert cs[1].flush_count[:-1].max() >= 2 if mode == "replay" else True


def test_bf16_activations():
    HV, K, V = 2, 32, 16
    x = random_decode_inputs("gdn", 5, 2, HV, K, V, generator=_gen(8), device=DEV, dtype=torch.bfloat16)
    S0 = torch.randn(2, HV, V, K, generator=_gen(9)).to(DEV)
    cs = [_cache("gdn", "fp16", HV, K, V, b, slots=2) for b in ("torch", "triton")]
    for c in cs:
        c.load_state(torch.tensor([0, 1], device=DEV), S0)
    for t in range(5):
        o = [_step(c, torch.tensor([1, 0]), x, t) for c in cs]
        assert _rel(o[1], o[0]) <= 1e-5
    for a, b in zip(_all_tensors(cs[0], with_u=False), _all_tensors(cs[1], with_u=False)):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------
# Algorithm 3: read-copy error never enters the recurrence
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec,backend", [("nvfp4/fp32", "torch"), ("e4m3/fp32", "torch"), ("fp8/fp32", "torch"),
                                          ("int8/fp32", "torch"), ("fp8/fp32", "triton"), ("int8/fp32", "triton"),
                                          ("bf16/fp32", "torch"), ("nvfp4/fp32", "triton")])
def test_dual_fp32_recurrence_checkpoint_equals_oracle(family, spec, backend):
    HV, K, V, L, T = 2, 32, 12, 4, 12
    x = random_decode_inputs(family, T, 2, HV, K, V, generator=_gen(10), device=DEV, decay_scale=0.02)
    S0 = torch.randn(2, HV, V, K, generator=_gen(11)).to(DEV)
    c = _cache(family, spec, HV, K, V, backend, L=L, slots=2)
    slots = torch.tensor([1, 0], device=DEV)
    c.load_state(slots, S0)
    o_ref, s_ref = oracle_sequence(family, S0.cpu(), *(None if x[n] is None else x[n].cpu()
                                                        for n in ("q", "k", "v", "g", "beta")))
    read_err = 0.0
    for t in range(T):
        o = _step(c, slots, x, t).cpu()
        if (t + 1) % L == 0:
            # flush: output from the rebuilt fp32 state, checkpoint == oracle within fp32 rounding
            assert _rel(o, o_ref[t]) < 1e-5
            assert _rel(c.checkpoint(slots).cpu(), s_ref[t]) < 1e-5
        else:
            read_err = max(read_err, _rel(o, o_ref[t]))
    # the read copy was really in use on non-flush steps (its error is visible in the outputs)
    assert read_err > 1e-4


def test_shared_low_precision_recurrence_does_drift():
    """Contrast to the dual test: with a shared nvfp4 checkpoint the recurrence carries the error."""
    HV, K, V, L, T = 2, 32, 12, 4, 8
    x = random_decode_inputs("gdn", T, 1, HV, K, V, generator=_gen(12), device=DEV, decay_scale=0.02)
    S0 = torch.randn(1, HV, V, K, generator=_gen(13)).to(DEV)
    c = _cache("gdn", "nvfp4", HV, K, V, "torch", L=L, slots=1)
    c.load_state(torch.tensor([0], device=DEV), S0)
    _, s_ref = oracle_sequence("gdn", S0.cpu(), *(None if x[n] is None else x[n].cpu()
                                                  for n in ("q", "k", "v", "g", "beta")))
    for t in range(T):
        _step(c, torch.tensor([0]), x, t)
    assert _rel(c.checkpoint(torch.tensor([0], device=DEV)).cpu(), s_ref[T - 1]) > 1e-2


# --------------------------------------------------------------------------------------------
# padded rows, load_state, stochastic rounding reproducibility
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_padded_rows_touch_nothing(backend):
    HV, K, V = 2, 32, 10
    x = random_decode_inputs("kda", 6, 3, HV, K, V, generator=_gen(14), device=DEV)
    c = _cache("kda", "nvfp4/e4m3+sr", HV, K, V, backend, L=3, slots=4)
    c.load_state(torch.tensor([0, 1, 2, 3], device=DEV), torch.randn(4, HV, V, K, generator=_gen(15)).to(DEV))
    _step(c, torch.tensor([0, 1, 2]), x, 0)          # slots now mid-ring
    _step(c, torch.tensor([2, 1, 0]), x, 1)          # next step would flush them
    before = _all_tensors(c)
    o = _step(c, torch.tensor([-1, -3, -1]), x, 2)
    assert torch.all(o == 0)
    for a, b in zip(before, _all_tensors(c)):
        assert torch.equal(a, b)
    o = _step(c, torch.tensor([-1, 3, -2]), x, 3)     # only slot 3 may change
    assert torch.all(o[[0, 2]] == 0) and not torch.isnan(o).any()
    after = _all_tensors(c)
    for a, b in zip(before, after):
        if a.dim() and a.shape[0] == 4:
            assert torch.equal(a[:3], b[:3])


@pytest.mark.parametrize("spec", ["e4m3/fp16+sr", "nvfp4+sr", "bf16"])
def test_load_state_casts_like_a_flush(spec):
    HV, K, V = 2, 32, 8
    S = torch.randn(2, HV, V, K, generator=_gen(16)).to(DEV)
    c = _cache("gdn", spec, HV, K, V, "torch", slots=3, seed=3)
    slots = torch.tensor([2, 0], device=DEV)
    c.load_state(slots, S)
    if c.spec.sr:   # flush number 0: Philox c2 = 0, stream tag 0
        rb = sr_rbits(c.seed, slots, HV, V, K, torch.zeros(2, dtype=torch.int32, device=DEV), 0)
        expect = round_to_format(S, c.spec.recur.name, "sr", rb)
        assert not torch.equal(expect, round_to_format(S, c.spec.recur.name))
    else:
        expect = round_to_format(S, c.spec.recur.name)
    assert torch.equal(c.checkpoint(slots), expect)
    if not c.spec.shared:
        assert torch.equal(c.lp.decode(slots), round_to_format(S, c.spec.read.name))
    assert torch.equal(c.state(slots), c.checkpoint(slots))
    assert torch.all(c.ring_count[slots] == 0) and torch.all(c.flush_count[slots] == 1)


def test_stored_tensors_names_every_tensor():
    """stored_tensors: the cache's own tensors by name (shared spec: hp and lp are the same tensors)."""
    c = _cache("gdn", "fp16", 2, 16, 8, "torch", slots=3)
    st = c.stored_tensors()
    assert list(st) == ["hp0", "hp1", "hp2", "lp0", "lp1", "lp2", "ring_g", "ring_k", "ring_v", "ring_beta", "ring_u",
                        "ring_count", "flush_count"]
    assert st["ring_u"] is c.ring_u and st["flush_count"] is c.flush_count and st["lp0"] is st["hp0"]
    sep = _cache("gdn", "nvfp4/fp16", 2, 16, 8, "torch", slots=3).stored_tensors()
    assert sep["lp0"].dtype == torch.uint8 and sep["hp0"].dtype != torch.uint8


def test_stochastic_rounding_reproducible_from_seed():
    HV, K, V = 2, 32, 8
    x = random_decode_inputs("gdn", 6, 2, HV, K, V, generator=_gen(17), device=DEV)
    S0 = torch.randn(2, HV, V, K, generator=_gen(18)).to(DEV)

    def run(seed):
        c = _cache("gdn", "nvfp4/e4m3+sr", HV, K, V, "triton", L=3, slots=2, seed=seed)
        c.load_state(torch.tensor([0, 1], device=DEV), S0)
        for t in range(6):
            _step(c, torch.tensor([0, 1]), x, t)
        return _all_tensors(c)

    a, b, other = run(5), run(5), run(6)
    assert all(torch.equal(u, w) for u, w in zip(a, b))
    assert not torch.equal(a[0], other[0])           # the e4m3 recurrence checkpoint depends on the seed


@pytest.mark.parametrize("family", ["gdn", "kda", "mamba2"])
@pytest.mark.parametrize("spec,mode", [("fp32", "replay"), ("nvfp4/fp8+sr", "replay"), ("fp8+sr", "replay"),
                                       ("int8", "conventional"), ("fp32", "conventional")])
@pytest.mark.parametrize("max_draft", [0, 3])
def test_bytes_per_slot_is_what_the_cache_allocates(family, spec, mode, max_draft):
    """bytes_per_slot counts every byte the cache allocates per slot, no more and no less: the stored tensors
    (each once: a shared spec's read copy is its checkpoint) over the slots, counters at 4 bytes each."""
    S = 3
    c = SSMStateCache(family, spec, S, 4, 32, 16, window=4, mode=mode, backend="torch", max_draft=max_draft,
                      num_key_heads=2)
    seen, data = set(), 0
    for name, t in c.stored_tensors().items():
        if name.endswith("_count") or id(t) in seen:
            continue
        seen.add(id(t))
        data += t.numel() * t.element_size()
    counters = 4 * (3 if max_draft else 2) + 4      # ring_count, flush_count (draft_count), step_arrivals
    assert data % S == 0 and c.bytes_per_slot() == data // S + counters


def test_bytes_per_slot():
    c = _cache("gdn", "nvfp4/fp16", 4, 128, 128, "torch", L=16, slots=1)
    ckpt = 4 * 128 * (64 + 8) + 4 * 4 + 4 * 128 * 128 * 2
    ring = 4 * 15 * (1 + 128 + 128 + 1 + 128) * 4 + 12
    assert c.bytes_per_slot() == ckpt + ring
    conv = _cache("mamba2", "fp32", 4, 128, 64, "torch", mode="conventional", slots=1)
    assert conv.bytes_per_slot() == 4 * 64 * 128 * 4 + 12
    half = SSMStateCache("gdn", "nvfp4/fp16", 1, 4, 128, 128, window=16, backend="torch", ring_dtype=torch.bfloat16)
    assert half.bytes_per_slot() == ckpt + 4 * 15 * ((1 + 1 + 128) * 4 + (128 + 128) * 2) + 12


@pytest.mark.parametrize("backend,split", [("torch", None), ("triton", False), ("triton", True)],
                         ids=["torch", "fused", "split"])
@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp16"), ("kda", "e4m3/fp32"), ("mamba2", "fp16+sr"),
                                         ("gdn", "fp32")])
def test_half_precision_ring_is_exact_for_half_precision_inputs(family, spec, backend, split):
    """A ring that keeps k and v in bf16 (``ring_dtype``), fed bf16 activations, gives the same bits as the
    float32 ring everywhere (outputs, checkpoints, corrections) in less memory; other input dtypes are refused."""
    HV, K, V, L, T = 2, 32, 12, 4, 10
    x = random_decode_inputs(family, T, 3, HV, K, V, generator=_gen(21), device=DEV, dtype=torch.bfloat16)
    S0 = torch.randn(3, HV, V, K, generator=_gen(22)).to(DEV)
    idx = torch.tensor([2, 0, 1], device=DEV)
    caches = [_cache(family, spec, HV, K, V, backend, L=L, slots=3, split_flush=split, ring_dtype=dt)
              for dt in (torch.float32, torch.bfloat16)]
    for c in caches:
        c.load_state(idx.to(DEV), S0)
    for t in range(T):
        o32, o16 = (_step(c, idx, x, t) for c in caches)
        assert torch.equal(o32, o16), t
    for a, b in zip(_all_tensors(caches[0]), _all_tensors(caches[1])):
        assert torch.equal(a.float(), b.float())
    # the corrections stay fp32 (mamba2 has none: its u ring is the raw v ring)
    assert caches[1].ring_k.dtype == torch.bfloat16 and caches[1].ring_u.dtype == (torch.float32 if caches[1].delta
                                                                                   else torch.bfloat16)
    assert caches[1].ring_bytes_per_slot() < caches[0].ring_bytes_per_slot()
    with pytest.raises(ValueError, match="k has dtype torch.float32, but this cache's ring keeps torch.bfloat16"):
        caches[1].step(idx, x["q"][0], x["k"][0].float(), x["v"][0], x["g"][0],
                       None if x["beta"] is None else x["beta"][0])


@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/e4m3+sr"), ("mamba2", "nvfp4+sr"), ("gdn", "nvfp4+sr"),
                                         ("kda", "nvfp4")])
@pytest.mark.parametrize("split", [False, True], ids=["fused", "split"])
def test_nvfp4_two_pass_flush_bit_exact(family, spec, split):
    """V = 40 with 16-row flush sub-blocks: the nvfp4 flush takes the two-pass path (amax pass saving the
    corrections, then the encode pass reloading them; shared delta-rule specs: only the current correction,
    the others are the ring's cached ones); still bit for bit the torch reference. Fused: the pv == 0 program of
    the head's 16-row V-blocks (3, the last one masked: 40 = 16 + 16 + 8) flushes the whole head, pass 2
    recomputing S_L; split: the same as a work item of the persistent flush launch, pass 2 reloading S_L from the
    flush launch's fp32 scratch."""
    HV, K, V, L = 1, 32, 40, 3
    x = random_decode_inputs(family, 7, 2, HV, K, V, generator=_gen(21), device=DEV)
    S0 = torch.randn(2, HV, V, K, generator=_gen(22)).to(DEV)
    kw = dict(block_v=16, split_flush=True) if split else {}
    cs = [_cache(family, spec, HV, K, V, b, L=L, slots=3, seed=5, flush_block_v=16, **kw)
          for b in ("torch", "triton")]
    for c in cs:
        c.load_state(torch.tensor([2, 0], device=DEV), S0)
    idx = torch.tensor([2, 0], device=DEV)
    for t in range(7):
        outs = [_step(c, idx, x, t) for c in cs]
        assert _rel(outs[1], outs[0]) <= 1e-5, t
        for a, b in zip(_all_tensors(cs[0]), _all_tensors(cs[1])):
            _assert_stored_match(a, b)
    assert cs[1].flush_count[:-1].max() >= 3


@pytest.mark.parametrize("family,spec,fbv", [("gdn", "fp32", 16), ("kda", "fp16+sr", 32), ("mamba2", "e4m3/fp32", 16),
                                             ("gdn", "e4m3/bf16+sr", 32)])
def test_split_flush_sub_block_items_bit_exact(family, spec, fbv):
    """The split flush launch with few flush rows makes every pair of 16-row sub-blocks (every 32-row sub-block)
    a work item of its own (flush._flush_kernel; in the interpreter 4 programs: one flush row of HV = 2 heads
    is 2 items, half the grid; V = 40: rows 0-31 and 32-63, the second item partly / wholly masked), else one
    item per (row, head) walks the head's 4 (2) sub-blocks. Ring positions staggered so most steps flush one
    row, a reload puts two slots in phase (two flush rows: whole-head items). Bit for bit the torch reference
    either way, stochastic rounding included."""
    _staggered_split_flush_bit_exact(family, spec, 24, dict(block_v=fbv, flush_block_v=fbv))


@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp16"), ("mamba2", "nvfp4+sr"), ("kda", "nvfp4/e4m3+sr"),
                                         ("gdn", "nvfp4+sr")])
def test_split_nvfp4_flush_sub_block_items_bit_exact(family, spec):
    """nvfp4 checkpoints with few flush rows: every 16-row sub-block of a flushing head is an item of its own, S_L
    and its amax in nvfp4_items._nvfp4_part_kernel, the encode in flush._flush_kernel (V = 40: three sub-blocks, the
    last partly masked; one flush row of HV = 2 heads fills half of the interpreter's 4 programs), else the
    whole-head two-pass items of flush._flush_kernel (two flush rows). Bit for bit the torch reference either way
    (the head's encode scale from the sub-blocks' amaxes; SR included)."""
    _staggered_split_flush_bit_exact(family, spec, 32, dict(block_v=16, flush_block_v=16, flush_nvfp4_items=True))


@pytest.mark.parametrize("family,spec,blocks,V", [("gdn", "nvfp4/fp16", 1, 40), ("kda", "nvfp4/e4m3+sr", 2, 40),
                                                  ("mamba2", "nvfp4+sr", 4, 40), ("kda", "nvfp4/fp16", None, 32)])
def test_split_nvfp4_items_any_sub_blocks_per_item_bit_exact(family, spec, blocks, V):
    """The pass-1 nvfp4 items with a fixed number of sub-blocks each (``flush_nvfp4_item_blocks``, unrolled): 1
    (three items per head), 2 (sub-blocks 0-1, then 2 and an all-masked 3 that must not be stored), 4 (one item per
    head, one masked sub-block); and decided on the device with V = 32: two sub-blocks per head, so one flush row's
    4 items fit the 4 programs with one sub-block each (the unrolled item). The default of the test above decides
    on the device too (a runtime loop): one flush row of 2 heads x 3 sub-blocks is 6 items > 4 programs, so 2
    sub-blocks per item, the second item of a head holding the last one. Bit for bit the torch reference every way."""
    _staggered_split_flush_bit_exact(family, spec, 32, dict(block_v=16, flush_block_v=16, flush_nvfp4_items=True,
                                                            flush_nvfp4_item_blocks=blocks), V=V)


@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp16"), ("kda", "fp8+sr")])
def test_split_flush_other_grid_bit_exact(family, spec):
    """The persistent flush grid at another size and warps per program (knobs ``flush_programs_per_sm=3``,
    ``flush_warps=2``): 1 or 2 flush rows x 2 heads are 2-4 work items for 3 programs, so a program may take a
    second item (the whole-head two-pass nvfp4 item, its scratch reused; or the small fp8 items), bit for bit the
    torch reference. (The interpreter runs any warp count alike; the GPU compiles 2-warp programs.)"""
    _staggered_split_flush_bit_exact(family, spec, 32, dict(block_v=16, flush_block_v=16, flush_nvfp4_items=False,
                                                            flush_warps=2, flush_programs_per_sm=3))


@pytest.mark.parametrize("family,spec,rows", [("gdn", "nvfp4/fp16", 32), ("kda", "nvfp4/e4m3+sr", 16),
                                               ("gdn", "nvfp4/fp8+sr", 64)])
def test_split_flush_whole_head_corrections_bit_exact(family, spec, rows):
    """A separate delta-rule spec's two-pass nvfp4 flush with the head's corrections computed first, ``rows`` rows
    at a time (knob ``flush_corrections_rows``; V = 40: groups past the head, masked), then reloaded by the
    sub-blocks: bit for bit the torch reference, whose corrections are per 16-row sub-block."""
    _staggered_split_flush_bit_exact(family, spec, 32, dict(block_v=16, flush_block_v=16, flush_nvfp4_items=False,
                                                            flush_corrections_rows=rows))


def test_split_nvfp4_items_own_warps_bit_exact():
    """The few-flush-rows nvfp4 pass-1 items in a launch of 2 warps, uncapped (knob ``flush_items_warps``), pass 2
    in the flush launch's 4: bit for bit the torch reference (the interpreter runs any warp count alike; the GPU
    compiles the 2-warp items kernel: tests/kernels/test_limit_scripts.py)."""
    _staggered_split_flush_bit_exact("gdn", "nvfp4/fp8+sr", 32, dict(block_v=16, flush_block_v=16,
                                                                     flush_nvfp4_items=True, flush_items_warps=2))


def test_split_flush_scratch_l2_hints_bit_exact():
    """The whole-head two-pass nvfp4 flush with L2 eviction hints on its S_L scratch (knob ``flush_scratch_l2``):
    bit for bit the torch reference (the interpreter ignores the hints; tests/kernels/test_limit_scripts.py checks
    that the compiled code carries them)."""
    _staggered_split_flush_bit_exact("gdn", "nvfp4/fp16", 32, dict(block_v=16, flush_block_v=16, flush_nvfp4_items=False,
                                                                   flush_scratch_l2=True))


@pytest.mark.parametrize("family", ["gdn", "mamba2"])
@pytest.mark.parametrize("batch,knobs", [(1, dict(split_flush=False, fused_nvfp4_spread=False)),
                                         (2, dict(split_flush=False, fused_nvfp4_spread=True)),
                                         (4, dict(split_flush=True, flush_nvfp4_items=False)),
                                         (4, dict(split_flush=True, flush_nvfp4_items=True))])
def test_nvfp4_read_copy_encodes_the_committed_state(family, batch, knobs):
    """An nvfp4 read copy is the NVFP4 encoding of the state the flush commits, its second-level scale from that
    state's own amax (DESIGN.md sec. 4), whichever way the two-pass flush runs: the fused grid's head program
    (batch 1; spread over the head's three V-block programs, batch 2), the split step's whole-head items and its
    sub-block items (rows start one step apart, so one row of 2 heads flushes per step: half of the interpreter's 4
    programs, the items' case). With an fp32 recurrence checkpoint the committed state is stored exactly, so
    after every flush the read copy must be ``nvfp4_quantize`` of the checkpoint bit for bit. On a GPU this holds
    only if pass 2 encodes the S_L whose amax pass 1 took (the kernels contract products into fmas)."""
    HV, K, V, L, T = 2, 32, 40, 4, 12
    x = random_decode_inputs(family, T, batch, HV, K, V, generator=_gen(41), device=DEV)
    c = _cache(family, "nvfp4/fp32", HV, K, V, "triton", L=L, slots=batch + 1, seed=3, block_v=16, flush_block_v=16,
               **knobs)
    idx = torch.arange(batch, device=DEV)
    c.load_state(idx, torch.randn(batch, HV, V, K, generator=_gen(42)).to(DEV))
    flushes = 0
    for t in range(T):
        sel = idx < t + 1   # row r joins at step r: staggered flushes
        before = c.flush_count[idx].clone()
        _step(c, idx[sel], {n: None if a is None else a[:, sel] for n, a in x.items()}, t)
        done = idx[c.flush_count[idx] != before]
        flushes += done.numel()
        if done.numel():
            codes, scale_bits, s_enc = qref.nvfp4_quantize(c.checkpoint(done))
            st = c.stored_tensors()
            assert torch.equal(st["lp2"][done], s_enc), t
            assert torch.equal(st["lp1"][done], scale_bits), t
            assert torch.equal(st["lp0"][done], codes), t
    assert flushes >= 2 * batch


def _staggered_split_flush_bit_exact(family, spec, K, knobs, V=40):
    """Split steps over staggered ring positions, so most steps flush one row and (after a reload puts two slots in
    phase) some flush two; every stored tensor bit for bit the torch reference, outputs within 1e-5."""
    HV, L = 2, 4
    x = random_decode_inputs(family, 14, 4, HV, K, V, generator=_gen(31), device=DEV)
    S0 = torch.randn(5, HV, V, K, generator=_gen(32)).to(DEV)
    cs = [_cache(family, spec, HV, K, V, b, L=L, slots=5, seed=9, split_flush=True, **knobs)
          for b in ("torch", "triton")]
    for c in cs:
        c.load_state(torch.arange(4, device=DEV), S0[:4])
    idx = torch.tensor([3, 0, 2, 1], device=DEV)
    one, two = 0, 0
    for t in range(14):
        if t == 6:   # slot 1 (at ring position 1) back to 0, in phase with slot 2
            for c in cs:
                c.load_state(torch.tensor([1], device=DEV), S0[4:])
        sel = idx < t + 1   # staggered start: slot s joins at step s
        flushing = int((cs[0].ring_count[idx[sel]] + 1 >= L).sum())
        one, two = one + (flushing == 1), two + (flushing == 2)
        xt = {n: None if a is None else a[:, sel] for n, a in x.items()}
        outs = [_step(c, idx[sel], xt, t) for c in cs]
        assert _rel(outs[1], outs[0]) <= 1e-5, t
        for a, b in zip(_all_tensors(cs[0]), _all_tensors(cs[1])):
            _assert_stored_match(a, b)
    assert one >= 6 and two >= 2, (one, two)


@pytest.mark.parametrize("family", ["gdn", "kda"])
@pytest.mark.parametrize("split", [False, True])
def test_stale_ring_entries_never_leak(family, split):
    """The fused kernel loads the whole ring (all L-1 entries) before it knows the ring count h and drops
    entries j >= h afterwards (split: the non-flush launch reads the live entries only): NaN/huge garbage in
    the stale entries must not reach any output."""
    HV, K, V, L = 2, 24, 12, 5
    x = random_decode_inputs(family, 2 * L, 3, HV, K, V, generator=_gen(40), device=DEV)
    S0 = torch.randn(3, HV, V, K, generator=_gen(41)).to(DEV)
    cs = [_cache(family, "fp32", HV, K, V, b, L=L, slots=3, block_v=8 if b == "triton" else None,
                 split_flush=split if b == "triton" else None) for b in ("torch", "triton")]
    for c in cs:
        c.load_state(torch.arange(3, device=DEV), S0)
        for t in _ring_tensors(c):
            t.fill_(float("nan"))
        c.ring_k[:, :, -1] = 3e38                      # inf * 0 would be NaN too
    idx = torch.tensor([2, 0, 1])
    for t in range(2 * L):
        o = [_step(c, idx, x, t) for c in cs]
        assert torch.isfinite(o[1]).all(), t
        assert _rel(o[1].cpu(), o[0].cpu()) <= 1e-5, t


@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp16"), ("kda", "nvfp4/e4m3+sr"), ("mamba2", "nvfp4/fp16")])
def test_split_flush_tf32x3_dots_close_to_ieee(family, spec):
    """The split flush with ``flush_dot="tf32x3"`` (the GPU default of dual nvfp4 specs: the key operands split into
    TF32 hi + lo once per (row, head), the recurrence tile unsplit, :func:`kernels.flush_math._dot_tf32x3`) against
    the same launch with IEEE dots, from the same state: the flush-step outputs (from the fp32 S_L) within 1e-5
    relative and every recurrence-checkpoint element within one step of its format. (Only flushes from equal
    states are compared: after one, a checkpoint element or a read-copy code may round the other way.) A dropped
    or misplaced lo part (TF32 alone is accurate to ~5e-4) fails this in the interpreter (each TF32 product
    computed in fp32) and on the GPU."""
    HV, K, V, L = 2, 48, 24, 3
    x = random_decode_inputs(family, 2 * L, 3, HV, K, V, generator=_gen(70), device=DEV)
    S0 = torch.randn(2, 3, HV, V, K, generator=_gen(71)).to(DEV)
    cs = [_cache(family, spec, HV, K, V, "triton", L=L, slots=3, seed=6, block_v=16, flush_block_v=16,
                 split_flush=True, flush_dot=d) for d in ("ieee", "tf32x3")]
    idx = torch.tensor([2, 0, 1], device=DEV)
    # one fp16 / e4m3 (E4M3) step: relative spacing, or the subnormal spacing below the normal range
    rel, sub = (2.0 ** -10, 2.0 ** -24) if spec.endswith("fp16") else (2.0 ** -3, 2.0 ** -9)
    for episode in range(2):
        for c in cs:
            c.load_state(idx, S0[episode])
        fc = cs[1].flush_count[idx].clone()
        for t in range(episode * L, episode * L + L):
            outs = [_step(c, idx, x, t) for c in cs]
        assert torch.equal(cs[1].flush_count[idx], fc + 1)      # the last step flushed every row, once
        assert _rel(outs[1], outs[0]) <= 1e-5, episode
        a, b = (c.checkpoint(idx).double() for c in cs)
        bad = (a - b).abs() > torch.clamp_min(rel * torch.maximum(a.abs(), b.abs()), sub)
        assert not bad.any(), (episode, a[bad][:5].tolist(), b[bad][:5].tolist())


@triton.jit
def _tf32_split_kernel(x_ptr, hi_ptr, lo_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    hi, lo = _tf32_split(tl.load(x_ptr + o))
    tl.store(hi_ptr + o, hi)
    tl.store(lo_ptr + o, lo)


def test_tf32_split_exact_parts():
    """x = hi + lo exactly, hi a TF32 value (low 13 bits zero) rounded to nearest (|lo| <= half a TF32 ulp of x),
    +-inf and NaN kept in hi; random magnitudes across the fp32 range, subnormals and signed zeros."""
    g = _gen(72)
    x = torch.randn(240, generator=g) * torch.exp2(torch.randint(-140, 120, (240,), generator=g).float())
    x = torch.cat([x, torch.tensor([0.0, -0.0, 1e-45, -3e-39, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -12, float("inf"),
                                    -float("inf"), float("nan"), 3.0e38, 1.5, -2.0 ** -126, 7.0, 1e-20, -1e20,
                                    2.0 ** -11])])
    hi, lo = torch.full((2, 256), 123.0, device=DEV)      # poisoned
    _tf32_split_kernel[(1,)](x.to(DEV), hi, lo, N=256)
    hi, lo = hi.cpu(), lo.cpu()
    fin = torch.isfinite(x)
    assert torch.equal(hi[~fin].isnan(), x[~fin].isnan()) and torch.equal(hi[x.isinf()], x[x.isinf()])
    assert ((hi[fin].view(torch.int32) & 0x1FFF) == 0).all()
    assert torch.equal((hi[fin].double() + lo[fin].double()), x[fin].double())
    ulp = torch.exp2(torch.floor(torch.log2(x[fin].double().abs().clamp_min(2.0 ** -126))) - 10)
    assert (lo[fin].double().abs() <= ulp / 2).all()
    assert float(lo[x == 1.0 + 3 * 2.0 ** -12]) == -(2.0 ** -12)       # rounded up to 1 + 2^-10, not truncated


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CUDA-graph capture of two streams)")
@pytest.mark.parametrize("family,spec", [("gdn", "fp32"), ("gdn", "nvfp4/fp16"), ("kda", "fp16")])
def test_flush_side_stream_bit_identical_gpu(family, spec):
    """GPU: the split step with the flush launches on a side stream (default) == on the caller's stream, bit for bit,
    eager and replayed as a CUDA graph (scripts/gpu/knob_identity_check.py runs the benchmark's shapes). kda: its
    non-flush scratch is small enough to share the allocator's small-block pool with the flush-row list (a block
    freed between the launches and reused on the side stream crashed the benchmark before the fix)."""
    HV, K, V, L, B = 4, 64, 64, 4, 24
    x = random_decode_inputs(family, 2 * L, B, HV, K, V, generator=_gen(70), device="cuda")
    S0 = torch.randn(B, HV, V, K, generator=_gen(71)).cuda()
    variants = (dict(flush_stream=0), dict(flush_stream=1))
    cs = [_cache(family, spec, HV, K, V, "triton", L=L, slots=B, seed=4, split_flush=True, **kw) for kw in variants]
    idx = torch.arange(B, device="cuda")
    for c in cs:
        c.load_state(idx.to(DEV), S0)
        c.ring_count[:B] = torch.arange(B, device="cuda", dtype=torch.int32) % L     # every step mixes flushes
    outs = [[_step(c, idx, x, t).clone() for t in range(L)] for c in cs]
    for c in cs:
        g = torch.cuda.CUDAGraph()
        out = torch.empty(B, HV, V, device="cuda")
        with torch.cuda.graph(g):
            for t in range(L, 2 * L):
                c.step(idx, x["q"][t], x["k"][t], x["v"][t], x["g"][t], x["beta"][t], out=out, validate=False)
        g.replay()
        outs[cs.index(c)].append(out.clone())
    torch.cuda.synchronize()
    for i in range(1, len(cs)):
        assert all(torch.equal(a, b) for a, b in zip(outs[0], outs[i])), variants[i]
        assert all(torch.equal(a, b) for a, b in zip(_all_tensors(cs[0]), _all_tensors(cs[i]))), variants[i]


def _split_pair(family, spec, block_v, K=48, V=13, **knobs):
    """A fused and a split cache (launcher ``knobs`` on the split one)."""
    HV, L = 2, 4
    return [_cache(family, spec, HV, K, V, "triton", L=L, seed=11, block_v=block_v, split_flush=s,
                   **(knobs if s else {})) for s in (False, True)]


@pytest.mark.parametrize("family,spec,block_v,knobs", [
    ("gdn", "fp32", 8, {}), ("gdn", "nvfp4+sr", None, {}), ("kda", "nvfp4/e4m3+sr", None, {}),
    ("mamba2", "e4m3+sr", 8, {}), ("gdn", "bf16/fp32", 16, {}),
    # the non-flush launch's unrolled chunk loop with the register prefetch the other way than its default (on
    # for fp32 / 8-bit read copies), and its staged loop where the default (here: a small grid) is unrolled
    ("gdn", "fp16", 8, dict(nonflush_prefetch=True, nonflush_stages=0)),
    ("kda", "nvfp4/fp16", None, dict(nonflush_stages=3)),
    ("mamba2", "fp32", 16, dict(nonflush_prefetch=False, nonflush_stages=0)),
    ("gdn", "nvfp4/fp16", None, dict(nonflush_warps=4)), ("kda", "e4m3+sr", None, dict(nonflush_stages=3)),
    ("mamba2", "e4m3+sr", 8, dict(nonflush_stages=2)), ("gdn", "fp32", 8, dict(nonflush_stages=0)),
    # key dims with one (K <= 16) and two non-flush key chunks (K = 48 above: four)
    ("gdn", "fp32", 8, dict(K=16)), ("kda", "e4m3/fp16+sr", None, dict(K=24)),
    # flush work items of several 16-row sub-blocks (V = 40: the last one partly masked)
    ("gdn", "fp32", 16, dict(V=40)), ("kda", "e4m3/fp16+sr", 16, dict(V=40)), ("mamba2", "fp16", 16, dict(V=40)),
    ("gdn", "bf16/fp32", 16, dict(V=40, flush_stages=2))])
def test_split_flush_bit_identical_to_fused(family, spec, block_v, knobs):
    """The split step (launch 1: non-flush rows, launch 2: flush rows) == the fused kernel bit for bit in the
    interpreter (on a GPU: counters exactly, the rest within :func:`_assert_stored_match`'s bounds):
    outputs, checkpoints, ring (cached corrections included), counters, on a schedule where one launch mixes
    flushing and non-flushing rows, padded rows and permuted slots; the output is NaN-poisoned before every
    step and must be fully overwritten (padded rows: zeros) in both modes. Stale ring entries hold 1e30."""

    knobs = dict(knobs)
    HV, K, V = 2, knobs.pop("K", 48), knobs.pop("V", 13)
    x = random_decode_inputs(family, 9, 4, HV, K, V, generator=_gen(60), device=DEV)
    S0 = torch.randn(3, HV, V, K, generator=_gen(61)).to(DEV)
    cs = _split_pair(family, spec, block_v, K, V, **knobs)
    for c in cs:
        for r in _ring_tensors(c):
            r.fill_(1e30)
    assert [plan_step(c, 4).split for c in cs] == [False, True]
    for c in cs:
        c.load_state(torch.tensor([4, 0], device=DEV), S0[:2])
    schedule = [torch.tensor([4, -1, 0, -1]), torch.tensor([0, 4, -1, -1]), "load",
                torch.tensor([1, 0, -1, 4]), torch.tensor([4, 1, 0, -1]), torch.tensor([-1, 0, 4, 1]),
                torch.tensor([1, -1, 4, 0]), torch.tensor([0, 1, 4, -1]), torch.tensor([-1, -1, -1, -1])]
    t, mixed = 0, 0
    for item in schedule:
        if isinstance(item, str):
            for c in cs:
                c.load_state(torch.tensor([1], device=DEV), S0[2:])
            continue
        item = item.to(DEV)
        h = cs[1].ring_count[item.clamp_min(0)]
        fl = (h + 1 >= 4) & (item >= 0)
        mixed += bool(fl.any() and (~fl & (item >= 0)).any())
        outs = [_step(c, item, x, t % 9) for c in cs]
        t += 1
        for o in outs:
            assert not torch.isnan(o).any()
            assert torch.all(o[item < 0] == 0)
        if DEV == "cpu":
            assert torch.equal(outs[0], outs[1]), t
        else:   # two compiled kernels contract different products into fmas (_assert_stored_match)
            assert _rel(outs[1], outs[0]) <= (1e-5 if cs[0].spec.read.name == "fp32" else 1e-3), t
        for a, b in zip(_all_tensors(cs[0]), _all_tensors(cs[1])):
            _assert_stored_match(a, b)
    assert mixed >= 2                                   # launches that flush some rows and not others
    assert cs[1].flush_count[:-1].max() >= 2


@pytest.mark.parametrize("family,spec,mode,split,step_advance,arrive_deferred", [
    ("gdn", "fp32", "replay", False, None, None), ("kda", "nvfp4/e4m3+sr", "replay", False, None, None),
    ("mamba2", "e4m3+sr", "replay", False, None, None), ("gdn", "fp32", "conventional", False, None, None),
    ("gdn", "fp32", "conventional", False, False, None), ("kda", "fp32", "replay", False, False, None),
    ("gdn", "fp32", "replay", True, None, None), ("gdn", "fp32", "replay", False, None, True),
    ("kda", "nvfp4/e4m3+sr", "replay", False, None, True), ("mamba2", "e4m3+sr", "conventional", False, None, False)])
def test_step_advances_counters_fused_in_the_step_launch(family, spec, mode, split, step_advance, arrive_deferred,
                                                         monkeypatch):
    """A small fused step advances the ring and flush counters itself (the last program of each row; no
    ``_advance_kernel`` launch; the default off the GPU); with ``step_advance=False`` and on a split step
    ``_advance_kernel`` runs once per step. Counters equal the torch reference's after every step (padded rows,
    permuted slots, flushing and non-flushing rows mixed, several V-block programs per row), and the arrival
    counts are back to zero. Both forms of the arrival (``arrive_deferred``: the reply kept in one thread, the
    conventional default; or handed to every thread at the atomic, the replay default) on both kinds of step."""
    from replayssm_quant.kernels import decode

    launches = []

    class Counted:
        def __getitem__(self, grid):
            launches.append(grid)
            return real[grid]

    real = decode._advance_kernel
    monkeypatch.setattr(decode, "_advance_kernel", Counted())
    HV, K, V, L = 2, 32, 13, 3
    x = random_decode_inputs(family, 8, 3, HV, K, V, generator=_gen(70), device=DEV)
    ref = _cache(family, spec, HV, K, V, "torch", mode=mode, L=L, slots=4, seed=3)
    tri = _cache(family, spec, HV, K, V, "triton", mode=mode, L=L, slots=4, seed=3, block_v=4,
                 split_flush=split if mode == "replay" else None, step_advance=step_advance,
                 arrive_deferred=arrive_deferred)
    schedule = [[0, 2, -1], [2, -1, 0], [1, 0, 2], [3, 1, -1], [0, 3, 2], [-1, -1, -1], [2, 0, 1], [1, 2, 3]]
    for t, rows in enumerate(schedule):
        idx = torch.tensor(rows)
        _step(ref, idx, x, t)
        _step(tri, idx, x, t)
        assert torch.equal(tri.ring_count[:-1], ref.ring_count[:-1]), t
        assert torch.equal(tri.flush_count[:-1], ref.flush_count[:-1]), t
        assert torch.all(tri.step_arrivals == 0), t
    assert int(ref.flush_count.sum()) >= 3
    assert len(launches) == (len(schedule) if split or step_advance is False else 0)
    assert (plan_step(tri, 3).arrive_lanes > 0) == (False if split or step_advance is False
                                                      else arrive_deferred if arrive_deferred is not None
                                                      else mode == "conventional")


@pytest.mark.parametrize("phase", [1, 2])
def test_split_phases_touch_only_their_rows(phase, monkeypatch):
    """One phase of a split step alone: the non-flush launch (_nonflush_kernel) leaves every flushing slot
    untouched and writes the outputs of the non-flush and padded rows only; the flush launches (_flush_rows_kernel
    listing the flush rows, the persistent _flush_kernel) leave every non-flushing slot untouched and write the
    flush rows' outputs only (padded and non-flush rows keep the NaN poison)."""
    from replayssm_quant.kernels import decode, flush, fused, nonflush

    HV, K, V, L = 2, 48, 13, 4
    x = random_decode_inputs("gdn", 4, 4, HV, K, V, generator=_gen(62), device=DEV)
    c = _cache("gdn", "e4m3/fp16+sr", HV, K, V, "triton", L=L, seed=3, block_v=8, split_flush=True)
    c.load_state(torch.tensor([0, 1, 2], device=DEV), torch.randn(3, HV, V, K, generator=_gen(63)).to(DEV))
    for t in range(L - 1):                             # slot 2 is now one step before its flush
        _step(c, torch.tensor([2, -1, -1, -1]), x, t)
    _step(c, torch.tensor([-1, 0, -1, -1]), x, 0)
    idx = torch.tensor([1, 2, -1, 0]).to(DEV)          # rows: non-flush (h=0), flush, padded, non-flush (h=1)
    before = _all_tensors(c)
    phases = []

    class OnePhase:                                    # runs only the launch of this phase
        def __init__(self, kernel, which):
            self.kernel, self.which = kernel, which

        def __getitem__(self, grid):
            def launch(*args, **kw):
                phases.append(self.which)
                if self.which == phase:
                    self.kernel[grid](*args, **kw)
            return launch

    monkeypatch.setattr(nonflush, "_nonflush_kernel", OnePhase(nonflush._nonflush_kernel, 1))
    monkeypatch.setattr(flush, "_flush_rows_kernel", OnePhase(flush._flush_rows_kernel, 2))
    monkeypatch.setattr(flush, "_flush_kernel", OnePhase(flush._flush_kernel, 2))
    monkeypatch.setattr(fused, "_decode_step_kernel", OnePhase(fused._decode_step_kernel, 0))   # never
    out = torch.full((4, HV, V), float("nan"), device=DEV)
    decode.triton_step(c, idx, x["q"][3], x["k"][3], x["v"][3], x["g"][3], x["beta"][3], out)
    assert phases == [1, 2, 2]
    written = [0, 2, 3] if phase == 1 else [1]
    for r in range(4):
        assert (not torch.isnan(out[r]).any()) if r in written else torch.isnan(out[r]).all(), (phase, r)
    if phase == 1:
        assert torch.all(out[2] == 0)
    untouched, changed = ([2], [0, 1]) if phase == 1 else ([0, 1], [2])
    per_slot = [(a, b) for a, b in zip(before, _all_tensors(c)) if a.dim() and a.shape[0] >= 3]
    for a, b in per_slot:
        for s_ in untouched:
            assert torch.equal(a[s_], b[s_]), (phase, s_)
    for s_ in changed:
        assert any(not torch.equal(a[s_], b[s_]) for a, b in per_slot), (phase, s_)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("family,spec", [("gdn", "fp32"), ("kda", "e4m3+sr"), ("gdn", "nvfp4+sr"),
                                         ("gdn", "bf16/fp32"), ("kda", "nvfp4/fp16")])
def test_flush_corrections_cached_for_shared_recomputed_for_separate(family, spec, backend):
    """Shared spec (Algorithm 1): the flush builds S_L from the corrections u_j cached in the ring (no raw
    v_j / beta_j are kept): NaN in a slot's cached u_j right before its flush reaches that slot's checkpoint.
    Separate spec (Algorithm 3): the flush recomputes u_j from S_hp and the raw v_j, beta_j: NaN in the cached
    u_j leaves the checkpoint bit-identical to the unpoisoned run, NaN in v_j / beta_j reaches it.
    The other slot of the launch is never affected."""
    HV, K, V, L = 2, 32, 12, 4
    x = random_decode_inputs(family, L, 2, HV, K, V, generator=_gen(50), device=DEV)
    S0 = torch.randn(2, HV, V, K, generator=_gen(51)).to(DEV)
    idx = torch.tensor([1, 0])

    def run(poison=None):
        c = _cache(family, spec, HV, K, V, backend, L=L, slots=2, seed=3, block_v=8 if backend == "triton" else None)
        c.load_state(torch.tensor([0, 1], device=DEV), S0)
        for t in range(L):
            if t == L - 1 and poison:                 # right before slot 1's flush step
                for name in poison:
                    getattr(c, name)[1] = float("nan")
            _step(c, idx, x, t)
        assert torch.all(c.ring_count[:2] == 0) and torch.all(c.flush_count[:2] == 2)
        return c.checkpoint(torch.tensor([0, 1], device=DEV)).cpu()

    clean = run()
    assert torch.isfinite(clean).all()
    shared = _cache(family, spec, HV, K, V, backend, L=L).spec.shared
    if shared:
        c = _cache(family, spec, HV, K, V, backend, L=L)
        assert c.ring_v.numel() == 0 and c.ring_beta.numel() == 0     # no raw v / beta in the ring
        bad = run(["ring_u"])
        assert torch.isnan(bad[1]).any()
        assert torch.equal(bad[0], clean[0])
    else:
        assert torch.equal(run(["ring_u"]), clean)
        for name in ("ring_v", "ring_beta"):
            bad = run([name])
            assert torch.isnan(bad[1]).any(), name
            assert torch.equal(bad[0], clean[0]), name


@pytest.mark.parametrize("family", ["gdn", "kda"])
def test_bytes_per_slot_shared_ring_has_no_raw_inputs(family):
    """Shared delta-rule spec: the ring holds g, k, u (no raw v, beta); separate: g, k, v, beta, u."""
    GK = 128 if family == "kda" else 1
    shared = _cache(family, "fp32", 4, 128, 128, "torch", L=16, slots=1)
    assert shared.ring_bytes_per_slot() == 4 * 15 * (GK + 128 + 128) * 4 + 12
    assert shared.bytes_per_slot() == 4 * 128 * 128 * 4 + shared.ring_bytes_per_slot()
    sep = _cache(family, "bf16/fp32", 4, 128, 128, "torch", L=16, slots=1)
    assert sep.ring_bytes_per_slot() == 4 * 15 * (GK + 128 + 128 + 1 + 128) * 4 + 12


def test_flush_rows_list_over_several_blocks():
    """_flush_rows_kernel lists the rows that flush (slot >= 0 and h + 1 >= L) in row order, also when the batch
    spans several BLOCK-row chunks (B = 11, BLOCK = 4, masked tail); entries past the count are not written."""
    from replayssm_quant.kernels import flush

    g = _gen(70)
    L, B = 4, 11
    cnt = torch.randint(0, L, (9,), generator=g, dtype=torch.int32)
    idx = torch.randperm(8, generator=g)[:B].to(torch.int32)
    idx = torch.cat([idx, torch.tensor([-1, -1, -1, -1], dtype=torch.int32)])[torch.randperm(12, generator=g)][:B]
    rows = torch.full((B,), -7, dtype=torch.int32)
    n = torch.full((1,), -7, dtype=torch.int32)
    flush._flush_rows_kernel[(1,)](idx_ptr=idx.to(DEV), cnt_ptr=cnt.to(DEV), rows_ptr=(rows_d := rows.to(DEV)),
                                   nrows_ptr=(n_d := n.to(DEV)), B=B, L=L, BLOCK=4)
    want = [b for b in range(B) if idx[b] >= 0 and cnt[idx[b].clamp_min(0)] + 1 >= L]
    assert 0 < len(want) < B
    assert n_d.item() == len(want) and rows_d[:len(want)].tolist() == want
    assert (rows_d[len(want):] == -7).all()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", ["nvfp4+sr", "nvfp4/fp16", "fp16"])
@pytest.mark.parametrize("launch", ["fused", "split", "split-prefetch", "split-staged", "split-flipxs"])
@pytest.mark.parametrize("scale", [1.0, 1e6, 1e-12])
def test_nonflush_read_reduction_bit_exact(family, spec, launch, scale):
    """The read-copy reduction of a non-flush step on its own: the first step after a load (empty ring) with
    v = 0, so the output is S_lp (gamma q) (mamba2: exactly; delta rule: plus u (k . q)) and the correction
    ``u = -beta S_lp (gamma k)`` lands in the ring. Both equal the torch reference bit for bit in the
    interpreter (a stored
    correction or an output that rounds one block sum in another order differs), and stay within 1e-6 of the
    float64 sum over the decoded read copy, also for inputs scaled by 1e6 or 1e-12 (nvfp4 and row-scaled: the
    power-of-two scaling of the reduction, tiles._read_scale; K = 48: a padded key chunk). ``split-flipxs``: the chunks'
    inputs from the scratch row (LaunchKnobs.nonflush_xscratch) where the default computes them per chunk and
    the other way round."""
    HV, K, V = 2, 48, 11
    x = random_decode_inputs(family, 1, 3, HV, K, V, generator=_gen(31), device=DEV)
    x["v"] = torch.zeros_like(x["v"])
    x["q"] = x["q"] * scale
    x["k"] = x["k"] * scale
    S0 = torch.randn(3, HV, V, K, generator=_gen(32)).to(DEV) * torch.logspace(-3, 3, K).to(DEV)
    knobs = dict(split_flush=launch != "fused")
    if launch == "split-prefetch":
        knobs.update(nonflush_stages=0, nonflush_prefetch=True)
    elif launch == "split":
        knobs.update(nonflush_stages=0, nonflush_prefetch=False)
    elif launch == "split-staged":
        knobs.update(nonflush_stages=2)
    elif launch == "split-flipxs":   # the scratch row of the chunks' inputs where it is not the default, and back
        knobs.update(nonflush_stages=2, nonflush_xscratch=not spec.startswith("nvfp4"))
    cs = [_cache(family, spec, HV, K, V, b, L=4, slots=4, seed=3, **knobs) for b in ("torch", "triton")]
    idx = torch.tensor([2, 0, 1])
    for c in cs:
        c.load_state(idx.to(DEV), S0)
    outs = [_step(c, idx, x, 0) for c in cs]
    u = [c.ring_u[idx.to(DEV), :, 0].clone() for c in cs]
    if DEV == "cpu":   # the interpreter computes in the reference's order (the GPU contracts products into fmas)
        assert torch.equal(outs[1], outs[0])
        assert torch.equal(u[1], u[0])
    # against float64 over the decoded read copy (delta rule: o = r_q + u (k . q), u = -beta r_k)
    S = cs[0].lp.decode(idx.to(DEV)).double()
    gam = torch.exp(x["g"][0].double())
    gam = gam if gam.dim() == 3 else gam[..., None]
    r_q = (S * (gam * x["q"][0].double())[:, :, None, :]).sum(-1)
    if family == "mamba2":
        o64 = r_q
    else:
        u64 = -x["beta"][0].double()[..., None] * (S * (gam * x["k"][0].double())[:, :, None, :]).sum(-1)
        o64 = r_q + u64 * (x["k"][0].double() * x["q"][0].double()).sum(-1, keepdim=True)
        assert _rel(u[1], u64) < 1e-6
    assert _rel(outs[1], o64) < 1e-6


@pytest.mark.parametrize("family", ["gdn", "mamba2"])
@pytest.mark.parametrize("spec", ["fp8+sr", "int8"])
@pytest.mark.parametrize("launch", ["fused", "split-staged", "split-flipxs"])
@pytest.mark.parametrize("scale", [1.0, 1e6, 1e-12])
def test_nonflush_rowscaled_read_reduction_bit_exact(family, spec, launch, scale):
    """The test above on row-scaled read copies, whose products take the codes' values before the row scale (the
    scale multiplies each row's sum once, ring._read_rowdot): bit for bit the torch reference, within 1e-6 of the
    float64 sum over the decoded copy."""
    test_nonflush_read_reduction_bit_exact(family, spec, launch, scale)
