"""Device correctness checks of the benchmark (``correctness.csv``): the decode kernels on the device against the
float64 oracle, the split step against the fused one, and the split flush's 3xTF32 dots against IEEE ones."""

from __future__ import annotations

import torch

from .bench_report import shape_key_group, shape_key_heads
from .inputs import random_decode_inputs, share_keys
from .launch import LaunchKnobs, flush_dot_precision
from .naive import oracle_sequence
from .state_cache import SSMStateCache


NAMES = ("q", "k", "v", "g", "beta")


def _rel(a, ref) -> float:
    return ((a - ref).abs().max() / ref.abs().max()).item()


class Oracle:
    """The checks' shared problem: ``T`` steps of random fp32 inputs ``x`` (``[T, rows, HV, ..]`` by name) for
    ``rows`` rows from the state ``S0`` ``[rows, HV, V, K]``, and the float64 oracle's outputs ``o_ref``
    ``[T, rows, HV, V]`` and states ``s_ref`` ``[T, rows, HV, V, K]``. Where the shape's ``num_key_heads`` is
    below ``num_heads`` the value heads of a key head share its key (``x["k_heads"]`` ``[T, rows, HK, K]``), and
    the caches keep one key per key head, as the benchmark times them (:func:`.inputs.share_keys`; ``shared_keys``
    False: a key per value head, fed the repeated keys). ``ring_dtype``: the dtype in which the caches' rings keep k
    and v; q, k, v are drawn in it (a cache with a bfloat16 ring takes bf16 inputs and keeps them exactly, as it keeps
    the benchmark's bf16 activations)."""

    def __init__(self, family, shape, window, device, steps=None, rows=3, shared_keys=True, ring_dtype=torch.float32):
        HV, K, V = shape["num_heads"], shape["head_k"], shape["head_v"]
        self.family, self.shape, self.window, self.device, self.rows = family, shape, window, device, rows
        self.shared_keys, self.ring_dtype = shared_keys, ring_dtype
        self.T = steps or 2 * window + 3
        self.x = share_keys(random_decode_inputs(family, self.T, rows, HV, K, V, device=device, dtype=ring_dtype,
                                                 generator=torch.Generator().manual_seed(99)), shape_key_group(shape))
        self.S0 = torch.randn(rows, HV, V, K, generator=torch.Generator().manual_seed(98)).to(device) * 0.3
        self.o_ref, self.s_ref = oracle_sequence(family, self.S0, *(None if self.x[n] is None else self.x[n]
                                                                   for n in NAMES))

    def cache(self, spec, mode="replay", knobs=None, seed=0):
        sh = self.shape
        return SSMStateCache(self.family, spec, self.rows, sh["num_heads"], sh["head_k"], sh["head_v"],
                             window=self.window, mode=mode, device=self.device, backend="triton", seed=seed,
                             knobs=knobs, num_key_heads=shape_key_heads(sh, self.shared_keys),
                             ring_dtype=self.ring_dtype)

    def step_inputs(self, c, t, i) -> tuple:
        """The inputs of steps ``t`` for rows ``i`` (index tensors or ints) as cache ``c`` takes them, in
        :data:`NAMES` order: the keys per key head where ``c`` keeps them so."""
        names = [("k_heads" if n == "k" and c.key_group > 1 else n) for n in NAMES]
        return tuple(None if self.x[n] is None else self.x[n][t, i] for n in names)

    def errors(self, c, all_outputs, stagger=False):
        """T steps of cache ``c`` from S0: the largest relative errors against the oracle of the outputs (every
        step, or the flush steps) and of the recurrence checkpoint after each flush, and whether the ring and flush
        counters were right after every step (ring count (tau + 1) mod L, flush count 1 + (tau + 1) div L after a
        row's own step tau; the fused step advances them in its own launch). ``stagger``: row i joins at step i mod L
        (its own steps 0 .. T-1 then), so on most steps one or two rows flush, not all of them."""
        idx = torch.arange(self.rows, device=self.device)
        c.load_state(idx, self.S0)
        start = idx % c.window if stagger else torch.zeros_like(idx)
        out_err, ckpt_err, counters_ok = 0.0, 0.0, True
        for t in range(self.T + int(start.max())):
            tau = t - start                          # each row's own step
            act = ((tau >= 0) & (tau < self.T)).nonzero().squeeze(1)
            ta, ia = tau[act], idx[act]
            o = c.step(ia, *self.step_inputs(c, ta, ia)).double()
            flush = (ta + 1) % c.window == 0         # (conventional: window 1, every step)
            if all_outputs:
                out_err = max(out_err, _rel(o, self.o_ref[ta, ia]))
            elif flush.any():
                out_err = max(out_err, _rel(o[flush], self.o_ref[ta[flush], ia[flush]]))
            if flush.any():
                ckpt_err = max(ckpt_err, _rel(c.checkpoint(ia[flush]).double(), self.s_ref[ta[flush], ia[flush]]))
            counters_ok &= bool(torch.equal(c.ring_count[ia], ((ta + 1) % c.window).int())
                                and torch.equal(c.flush_count[ia], (1 + (ta + 1) // c.window).int()))
        return out_err, ckpt_err, counters_ok


def flush_dot_check(oracle: Oracle, spec: str) -> dict:
    """The split flush's 3xTF32 dots against IEEE ones on ``spec`` (replay): the recurrence checkpoint's error
    against the float64 oracle after each flush, the same seed for both (the checkpoint's own rounding dominates
    both); ok when the 3xTF32 error is within 10% (+1e-6) of the IEEE one."""
    errs = {}
    for dot in ("ieee", "tf32x3"):
        c = oracle.cache(spec, knobs=LaunchKnobs(split_flush=True, flush_dot=dot), seed=5)
        errs[dot] = oracle.errors(c, False)[1]
    return dict(family=oracle.family, spec=spec, mode="replay", steps=oracle.T,
                checked="split flush, 3xTF32 dots: ckpt vs oracle; out column = the same with IEEE dots",
                max_rel_out_err=errs["ieee"], max_rel_ckpt_err=errs["tf32x3"],
                ok=bool(errs["tf32x3"] <= 1.1 * errs["ieee"] + 1e-6))


def correctness(family, shape, window, device, steps=None, rows=3, shared_keys=True, ring_dtype=torch.float32):
    """fp32 (replay, also with staggered rows; conventional) and nvfp4/fp32 (dual, also with staggered rows) on the
    device vs the float64 oracle; nvfp4+sr and nvfp4/fp8+sr replay: the split step against the fused kernel;
    nvfp4/fp16: the split flush's 3xTF32 dots against IEEE ones (:func:`flush_dot_check`). ``shared_keys``: the
    caches keep one key per key head of ``shape``; ``ring_dtype``: their rings' k and v (:class:`Oracle`). Returns the
    rows of ``correctness.csv``, each with the caches' ``key_heads`` and ``ring_dtype``."""
    oracle = Oracle(family, shape, window, device, steps, rows, shared_keys, ring_dtype)
    res = []
    for spec, mode, stagger in (("fp32", "replay", False), ("fp32", "replay", True), ("fp32", "conventional", False),
                                ("nvfp4/fp32", "replay", False), ("nvfp4/fp32", "replay", True)):
        out_err, ckpt_err, counters_ok = oracle.errors(oracle.cache(spec, mode), spec == "fp32", stagger)
        what = ("all outputs" if spec == "fp32" else "flush-step outputs") + (
            "; rows staggered (split flush launch with one or two flush rows: sub-block items"
            + (", nvfp4: nvfp4_items._nvfp4_part_kernel)" if "nvfp4" in spec else ")") if stagger else "")
        res.append(dict(family=family, spec=spec, mode=mode, steps=oracle.T, checked=what,
                        max_rel_out_err=out_err, max_rel_ckpt_err=ckpt_err, counters_ok=counters_ok,
                        ok=bool(out_err < 1e-5 and ckpt_err < 1e-5 and counters_ok)))
    res += [_split_vs_fused(oracle, spec) for spec in ("nvfp4+sr", "nvfp4/fp8+sr")]
    # the split flush's 3xTF32 dots (the default of a dual nvfp4 spec, flush_dot_precision) against IEEE ones
    res.append(flush_dot_check(oracle, "nvfp4/fp16"))
    c = oracle.cache("fp32")   # key heads below num_heads: the value heads of a key head share its key
    for r in res:
        r["key_heads"], r["ring_dtype"] = c.num_key_heads, str(c.ring_dtype).replace("torch.", "")
    return res


def _split_vs_fused(oracle: Oracle, spec: str) -> dict:
    """The split step against the fused one on the oracle's inputs, over the first L steps (a flush included)."""
    # the split step (separate non-flush / flush launches) against the fused kernel on the same inputs (no oracle
    # for rounded formats), over the first L steps (the flush included): outputs to fp32 rounding. The two kernels'
    # reductions may round in a different order, so the cached corrections (shared delta-rule specs) and hence
    # S_L can differ in the last bit: a head's nvfp4 scale s_enc then differs by an ulp (every element of the
    # head decodes ~1e-7 apart) and a stochastic rounding may land one quantum apart in rare elements. So the
    # share of decoded checkpoint elements more than 1e-5 (of the largest) apart is reported and bounded.
    # (both launches with the split launch's flush-dot precision: 3xTF32 for nvfp4/fp8+sr, flush_dot_precision)
    sh, window, device = oracle.shape, oracle.window, oracle.device
    probe = SSMStateCache(oracle.family, spec, 1, sh["num_heads"], sh["head_k"], sh["head_v"], window=window,
                          device=device, backend="torch")
    idx = torch.arange(oracle.rows, device=device)
    cs = []
    for split in (False, True):
        c = oracle.cache(spec, knobs=LaunchKnobs(split_flush=split, flush_dot=flush_dot_precision(probe, split=True)),
                         seed=3)
        c.load_state(idx, oracle.S0)
        cs.append(c)
    out_err = 0.0
    for t in range(window):
        o = [c.step(idx, *oracle.step_inputs(c, t, idx)).double() for c in cs]
        out_err = max(out_err, _rel(o[1], o[0]))
    ck = [c.checkpoint(idx).double() for c in cs]
    frac = ((ck[1] - ck[0]).abs() > 1e-5 * ck[0].abs().max()).double().mean().item()
    return dict(family=oracle.family, spec=spec, mode="replay", steps=window,
                checked="split vs fused: outputs; ckpt column = share of checkpoint elements > 1e-5 apart",
                max_rel_out_err=out_err, max_rel_ckpt_err=frac, ok=bool(out_err < 1e-5 and frac < 1e-4))
