"""Speculative verify / commit (Algorithm 2, kernels/spec_decode.py): outputs against the float64 oracle, the Triton
kernels against the torch reference bit for bit, separate specs against plain stepping, the conventional snapshot
baseline, padded rows, errors."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels import SSMStateCache, oracle_sequence  # noqa: E402
from replayssm_quant.kernels.inputs import random_decode_inputs  # noqa: E402
from replayssm_quant.kernels.launch import LaunchKnobs  # noqa: E402
from test_decode import _assert_stored_match  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = ("q", "k", "v", "g", "beta")


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _same_out(ref, got):
    """Triton outputs against the torch reference's: bit for bit in the interpreter; on a GPU (fma contraction,
    see test_decode._assert_stored_match) within 1e-3 of the largest output."""
    assert torch.equal(ref, got) if DEV == "cpu" else _rel(got, ref) <= 1e-3


def _rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).abs().max() / b.abs().max()).item()


class Streams:
    """Per-slot input streams ``[N, HV, .]`` (a slot's tokens in order) and the position of its committed prefix."""

    def __init__(self, family, n_slots, N, HV, K, V, seed):
        x = random_decode_inputs(family, N, n_slots, HV, K, V, generator=_gen(seed))
        self.x = {n: (None if t is None else t.transpose(0, 1).contiguous()) for n, t in x.items()}   # [S, N, ..]
        self.pos = [0] * n_slots

    def window(self, rows, T):
        """Inputs ``[B, T, ...]`` of the next ``T`` tokens of each row's slot (padded rows: slot 0's, unused)."""
        return [None if self.x[n] is None else
                torch.stack([self.x[n][max(s, 0), self.pos[max(s, 0)]:self.pos[max(s, 0)] + T] for s in rows]).to(DEV)
                for n in NAMES]

    def tokens(self, s, a, b):
        return [None if self.x[n] is None else self.x[n][s, a:b][:, None].double() for n in NAMES]


def _spec_cache(family, spec, backend, mode="replay", L=4, Tm=3, slots=3, HV=2, K=20, V=12, seed=3):
    return SSMStateCache(family, spec, slots, HV, K, V, window=L, mode=mode, max_draft=Tm, backend=backend,
                         device=DEV, seed=seed)


def _load(caches, slots, HV, K, V, seed):
    S0 = torch.randn(slots, HV, V, K, generator=_gen(seed)) * 0.3
    for c in caches:
        c.load_state(torch.arange(slots, device=DEV), S0.to(DEV))
    return S0.double()


def _stored(c):
    d = dict(c.stored_tensors())
    spec_parts = {"draft_count", "snap0", "snap1", "snap2"} if c.mode == "conventional" else \
        {"draft_count", "draft_g", "draft_v", "draft_beta"}
    assert spec_parts <= set(d)   # stored_tensors names the speculative buffers too
    for n in ("ring_count", "flush_count", "draft_count"):   # without the padded rows' scratch entry
        d[n] = d[n][:c.num_slots]
    return d


def _check_against_oracle(family, rows, out, acc, S, st, T, r):
    """A verify round's outputs ``out [B, T, HV, V]``: padded rows zero, the others within 1e-5 of the float64 oracle
    continued from each slot's committed state ``S[s]``; then ``S`` and the streams advance by ``acc`` tokens."""
    for i, s in enumerate(rows):
        if s < 0:
            assert torch.all(out[i] == 0)
            continue
        o, Sn = oracle_sequence(family, S[s][None], *st.tokens(s, st.pos[s], st.pos[s] + T))
        assert _rel(out[i], o[:, 0]) < 1e-5, (r, s)
        a = int(acc[i])
        S[s], st.pos[s] = Sn[a - 1, 0], st.pos[s] + a


@pytest.mark.parametrize("family", ["mamba2", "gdn", "kda"])
def test_rounds_equal_oracle_and_triton_equals_torch(family):
    """fp32, 42 verify/commit rounds with a random T per round and random accepted counts per row (a padded row in
    every launch, rows in another order than the slots), crossing 12+ flushes per slot, 4 plain steps in
    between: every verify output (accepted or not) is within 1e-5 of the float64 oracle continued with those
    drafts, the state after each commit is the oracle's committed state, and the Triton kernels keep every stored
    tensor bit-identical to the torch reference."""
    HV, K, V, L, Tm, NS = 1, 20, 12, 4, 3, 2
    cs = [_spec_cache(family, "fp32", b, L=L, Tm=Tm, slots=NS, HV=HV, K=K, V=V) for b in ("torch", "triton")]
    S = list(_load(cs, NS, HV, K, V, 1))
    st = Streams(family, NS, 140, HV, K, V, seed=2)
    gen = _gen(4)
    rows = [1, -1, 0]
    idx = torch.tensor(rows, device=DEV)
    for r in range(46):
        if r % 10 == 9:   # a plain decode step of every slot between two verify rounds
            x = [None if t is None else t[:, 0] for t in st.window(rows, 1)]
            outs = [c.step(idx, *x) for c in cs]
            _same_out(outs[0], outs[1])
            for i, s in enumerate(rows):
                if s >= 0:
                    o, Sn = oracle_sequence(family, S[s][None], *st.tokens(s, st.pos[s], st.pos[s] + 1))
                    assert _rel(outs[0][i], o[0, 0]) < 1e-5
                    S[s], st.pos[s] = Sn[-1, 0], st.pos[s] + 1
            continue
        T = int(torch.randint(1, Tm + 1, (1,), generator=gen))
        x = st.window(rows, T)
        outs = [c.verify(idx, *x) for c in cs]
        _same_out(outs[0], outs[1])
        acc = torch.randint(1, T + 1, (len(rows),), generator=gen)
        _check_against_oracle(family, rows, outs[1], acc, S, st, T, r)
        for c in cs:
            c.commit(idx, acc.to(DEV))
        ref, tri = _stored(cs[0]), _stored(cs[1])
        for n in ref:
            _assert_stored_match(ref[n], tri[n])
        state = cs[1].state(torch.arange(NS, device=DEV))
        for s in range(NS):
            assert _rel(state[s], S[s]) < 1e-5, (r, s)
    assert int(cs[1].flush_count[:NS].min()) >= 12


@pytest.mark.parametrize("family", ["mamba2", "gdn", "kda"])
def test_long_drafts_and_value_blocks(family):
    """T = 8 and 16 (the delta rule's stacked query / key tiles full: 16 and 32 rows) over a 16-token window, 2
    value blocks looped in one program (``block_v=16``) or split over two (``verify_split=2``): every output within
    1e-5 of the float64 oracle; the default launch bit-identical to the torch reference on every stored tensor; the
    blocked launches equal to the default launch (bit for bit in the interpreter, where each block is the same
    numpy matmul over the key dim)."""
    HV, K, V, L, Tm, NS = 1, 16, 32, 16, 16, 2
    knobs = [None, LaunchKnobs(block_v=16), LaunchKnobs(block_v=16, verify_split=2)]
    cs = [_spec_cache(family, "fp32", "torch", L=L, Tm=Tm, slots=NS, HV=HV, K=K, V=V)] + \
        [SSMStateCache(family, "fp32", NS, HV, K, V, window=L, max_draft=Tm, backend="triton", device=DEV, seed=3,
                       knobs=kn) for kn in knobs]
    S = list(_load(cs, NS, HV, K, V, 21))
    st = Streams(family, NS, 120, HV, K, V, seed=22)
    gen = _gen(23)
    rows = [0, -1, 1]
    idx = torch.tensor(rows, device=DEV)
    for r, T in enumerate((8, 16, 8, 16, 16)):
        x = st.window(rows, T)
        outs = [c.verify(idx, *x) for c in cs]
        _same_out(outs[0], outs[1])
        for o in outs[2:]:
            assert torch.equal(o, outs[1]) if DEV == "cpu" else _rel(o, outs[1]) <= 1e-3
        acc = torch.randint(1, T + 1, (len(rows),), generator=gen)
        _check_against_oracle(family, rows, outs[1], acc, S, st, T, r)
        for c in cs:
            c.commit(idx, acc.to(DEV))
        ref, tri = _stored(cs[0]), _stored(cs[1])
        for n in ref:
            _assert_stored_match(ref[n], tri[n])
            for c in cs[2:]:
                _assert_stored_match(tri[n], _stored(c)[n])
    assert int(cs[1].flush_count[:NS].min()) >= 2


@pytest.mark.parametrize("family,spec,mode", [
    ("gdn", "nvfp4/fp16+sr", "replay"), ("kda", "fp8+sr", "replay"), ("mamba2", "int8/fp32", "replay"),
    ("gdn", "int8+sr", "conventional"), ("kda", "nvfp4+sr", "conventional"), ("mamba2", "fp8+sr", "conventional")])
def test_triton_bit_exact_vs_torch(family, spec, mode):
    """Rounded specs (row-scaled fp8 / int8, nvfp4, shared and separate, SR): 6 rounds, every stored tensor
    (checkpoints, ring, draft buffers, snapshots, counters) and every output bit-identical between the backends."""
    HV, K, V, NS = 1, 32, 12, 2
    cs = [_spec_cache(family, spec, b, mode=mode, slots=NS, HV=HV, K=K, V=V, seed=9) for b in ("torch", "triton")]
    _load(cs, NS, HV, K, V, 5)
    st = Streams(family, NS, 60, HV, K, V, seed=6)
    gen = _gen(7)
    rows = [1, -1, 0]
    idx = torch.tensor(rows, device=DEV)
    for r in range(6):
        T = int(torch.randint(1, 4, (1,), generator=gen))
        x = st.window(rows, T)
        out = torch.full((len(rows), T, HV, V), float("nan"), device=DEV)   # poisoned
        outs = [cs[0].verify(idx, *x), cs[1].verify(idx, *x, out=out)]
        assert torch.isfinite(outs[1]).all() and torch.all(outs[1][1] == 0)
        _same_out(outs[0], outs[1])
        acc = torch.randint(1, T + 1, (len(rows),), generator=gen)
        for i, s in enumerate(rows):
            if s >= 0:
                st.pos[s] += int(acc[i])
        for c in cs:
            c.commit(idx, acc.to(DEV), validate=False)
        ref, tri = _stored(cs[0]), _stored(cs[1])
        for n in ref:
            _assert_stored_match(ref[n], tri[n])


@pytest.mark.parametrize("family,spec", [("gdn", "fp16"), ("kda", "nvfp4/fp16+sr")])
def test_half_precision_ring_and_drafts_of_a_whole_window(family, spec):
    """bf16 activations in a bf16 ring, T_max = L (the committed tail after a flush can be L - 1 entries): Triton ==
    torch bit for bit, the same flush counts as plain stepping."""
    HV, K, V, L, NS = 2, 32, 16, 4, 2
    cs = [SSMStateCache(family, spec, NS, HV, K, V, window=L, max_draft=L, backend=b, device=DEV,
                        ring_dtype=torch.bfloat16) for b in ("torch", "triton")]
    _load(cs, NS, HV, K, V, 3)
    x = random_decode_inputs(family, 30, NS, HV, K, V, generator=_gen(4), dtype=torch.bfloat16, device=DEV)
    idx = torch.tensor([1, 0], device=DEV)
    pos, done = 0, [0, 0]
    for T, acc in ((4, [4, 3]), (3, [3, 3]), (2, [2, 1]), (4, [4, 4]), (1, [1, 1])):
        xs = [None if x[n] is None else x[n][pos:pos + T].transpose(0, 1).contiguous() for n in NAMES]
        outs = [c.verify(idx, *xs) for c in cs]
        _same_out(outs[0], outs[1])
        for c in cs:
            c.commit(idx, torch.tensor(acc, device=DEV))
        ref, tri = _stored(cs[0]), _stored(cs[1])
        for n in ref:
            _assert_stored_match(ref[n], tri[n])
        pos += T
        for i, s in enumerate(idx.tolist()):
            done[s] += acc[i]
    assert cs[1].flush_count[:NS].tolist() == [1 + d // L for d in done]
    assert cs[1].ring_count[:NS].tolist() == [d % L for d in done]


@pytest.mark.parametrize("family,spec", [("gdn", "nvfp4/fp8+sr"), ("kda", "int8/fp32"), ("mamba2", "nvfp4+sr"),
                                         ("gdn", "fp8+sr:conventional")])
def test_checkpoints_equal_plain_stepping(family, spec):
    """The flush schedule is plain stepping's: after every commit the recurrence checkpoint and read copy of a
    separate spec (and any mamba2 spec, which has no corrections; and the conventional snapshot baseline) are
    bit-identical to a cache that decoded the same committed tokens one step at a time, with the same flush
    counters. Outputs: conventional bit for bit; replay tokens before the window's flush position to fp32
    reassociation (from the flush token on, the step path reads the recurrence checkpoint and then the newly
    rounded one, the verify the old read copy and the exact ring)."""
    spec, _, mode = spec.partition(":")
    mode = mode or "replay"
    HV, K, V, NS = 2, 32, 12, 3
    c = _spec_cache(family, spec, "torch", mode=mode, HV=HV, K=K, V=V, seed=21)
    p = SSMStateCache(family, spec, NS, HV, K, V, window=4, mode=mode, backend="torch", device=DEV, seed=21)
    _load([c, p], NS, HV, K, V, 8)
    st = Streams(family, NS, 80, HV, K, V, seed=9)
    gen = _gen(10)
    rows = [0, 1, 2]
    idx = torch.tensor(rows, device=DEV)
    for r in range(14):
        T = int(torch.randint(1, 4, (1,), generator=gen))
        o = c.verify(idx, *st.window(rows, T))
        acc = torch.randint(1, T + 1, (NS,), generator=gen)
        for s in rows:
            h = int(c.ring_count[s])
            for t in range(int(acc[s])):
                x = [None if y is None else y[s, st.pos[s]][None].to(DEV) for y in (st.x[n] for n in NAMES)]
                po = p.step(torch.tensor([s], device=DEV), *x)
                if mode == "conventional":
                    assert torch.equal(o[s, t], po[0])
                elif h + t < 3:
                    assert _rel(o[s, t], po[0]) < 1e-5
                st.pos[s] += 1
        c.commit(idx, acc.to(DEV))
        for a, b in zip(c.hp.tensors() + c.lp.tensors(), p.hp.tensors() + p.lp.tensors()):
            assert torch.equal(a, b), r
        assert torch.equal(c.flush_count, p.flush_count)
        if mode == "replay":
            assert torch.equal(c.ring_count, p.ring_count)
    assert int(c.flush_count[:NS].min()) >= 4


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_padded_rows_and_other_slots_untouched(backend):
    HV, K, V = 2, 16, 10
    c = _spec_cache("kda", "nvfp4/fp16+sr", backend, slots=4, HV=HV, K=K, V=V)
    _load([c], 4, HV, K, V, 11)
    st = Streams("kda", 4, 20, HV, K, V, seed=12)
    rows = [-1, 3, -2]
    before = {n: t.clone() for n, t in _stored(c).items()}
    for T, a in ((3, [2, 3, 1]), (2, [1, 2, 2]), (3, [3, 2, 3])):
        o = c.verify(torch.tensor(rows, device=DEV), *st.window(rows, T))
        assert torch.all(o[[0, 2]] == 0) and torch.isfinite(o).all()
        c.commit(torch.tensor(rows, device=DEV), torch.tensor(a, device=DEV))
    after = _stored(c)
    assert int(c.flush_count[3]) == 2 and int(c.ring_count[3]) == 3   # 7 tokens: 1 (load) + 1 flush; 7 - 4
    for n, t in before.items():
        if n.startswith("snap") or n in ("ring_count", "flush_count", "draft_count"):
            continue
        assert torch.equal(t[:3], after[n][:3]), n                   # slots 0..2 never touched


def test_errors():
    c = _spec_cache("gdn", "fp32", "torch", Tm=3, K=16, V=8)
    st = Streams("gdn", 3, 10, 2, 16, 8, seed=1)
    idx = torch.tensor([0, 1], device=DEV)
    x = st.window([0, 1], 2)
    with pytest.raises(ValueError, match="commit without a pending verify"):
        c.commit(idx, torch.tensor([1, 1], device=DEV))
    with pytest.raises(ValueError, match=r"T=4 tokens: allowed 1..3"):
        c.verify(idx, *st.window([0, 1], 4))
    with pytest.raises(ValueError, match=r"k has shape"):
        c.verify(idx, x[0], x[1][:, :1], *x[2:])
    with pytest.raises(ValueError, match=r"q must be a tensor \[B, T, HV, K\]"):
        c.verify(idx, x[0][:, 0], *x[1:])
    with pytest.raises(ValueError, match="v has dtype torch.int64"):
        c.verify(idx, x[0], x[1], x[2].long(), *x[3:])
    with pytest.raises(ValueError, match="positive log decays"):
        c.verify(idx, *x[:3], -x[3], x[4])
    with pytest.raises(ValueError, match="out must be a contiguous float32"):
        c.verify(idx, *x, out=torch.empty(2, 2, 2, 8, dtype=torch.float64))
    c.verify(idx, *x)
    with pytest.raises(ValueError, match=r"accepted counts out of range.*allowed 1..T"):
        c.commit(idx, torch.tensor([1, 3], device=DEV))
    with pytest.raises(ValueError, match=r"accepted counts out of range"):
        c.commit(idx, torch.tensor([0, 1], device=DEV))
    with pytest.raises(ValueError, match="accepted must be an int32/int64 tensor of shape"):
        c.commit(idx, torch.tensor([1.0, 1.0], device=DEV))
    with pytest.raises(ValueError, match="accepted must be an int32/int64 tensor of shape"):
        c.commit(idx, torch.tensor([1, 1, 1], device=DEV))
    c.step(idx[:1], *(None if t is None else t[:1, 0] for t in x))   # a step drops slot 0's pending verify
    with pytest.raises(ValueError, match="commit without a pending verify"):
        c.commit(idx, torch.tensor([1, 1], device=DEV))
    c.commit(idx[1:], torch.tensor([2], device=DEV))
    with pytest.raises(ValueError, match="commit without a pending verify"):   # once per verify
        c.commit(idx[1:], torch.tensor([1], device=DEV))
    plain = SSMStateCache("gdn", "fp32", 2, 2, 16, 8, backend="torch")
    with pytest.raises(ValueError, match="verify needs a cache created with max_draft >= 1"):
        plain.verify(idx, *x)
    with pytest.raises(ValueError, match="commit needs a cache created with max_draft >= 1"):
        plain.commit(idx, torch.tensor([1, 1], device=DEV))
    with pytest.raises(ValueError, match="max_draft=5 exceeds the window 4"):
        SSMStateCache("gdn", "fp32", 2, 2, 16, 8, window=4, max_draft=5, backend="torch")
    with pytest.raises(ValueError, match="max_draft must be an int >= 0"):
        SSMStateCache("gdn", "fp32", 2, 2, 16, 8, max_draft=-1, backend="torch")


def test_memory_and_ring_capacity():
    """max_draft 0 keeps today's layout; T_max > 0 grows the ring to L - 1 + T_max entries and adds the draft
    buffers; the conventional baseline adds T_max snapshots."""
    base = SSMStateCache("gdn", "nvfp4/fp16", 2, 2, 16, 8, window=4, backend="torch")
    spec = SSMStateCache("gdn", "nvfp4/fp16", 2, 2, 16, 8, window=4, backend="torch", max_draft=3)
    assert base.ring_k.shape[2] == 3 and spec.ring_k.shape[2] == 6
    assert spec.draft_g.shape == (2, 2, 3, 1) and spec.draft_v.shape[2] == 0     # separate: raw v in the ring
    shared = SSMStateCache("gdn", "fp16", 2, 2, 16, 8, window=4, backend="torch", max_draft=3)
    assert shared.draft_v.shape == (2, 2, 3, 8) and shared.ring_v.shape[3] == 0
    per_entry = 4 * (1 + 16 + 8 + 1 + 8) * 2                                    # g, k, v, beta, u (fp32) x HV
    assert spec.bytes_per_slot() - base.bytes_per_slot() == 3 * per_entry + 3 * 4 * 2 + 4
    conv = SSMStateCache("kda", "fp8", 2, 2, 16, 8, mode="conventional", backend="torch", max_draft=4)
    conv0 = SSMStateCache("kda", "fp8", 2, 2, 16, 8, mode="conventional", backend="torch")
    assert conv.bytes_per_slot() - conv0.bytes_per_slot() == 4 * conv.hp.bytes_per_slot() + 4
