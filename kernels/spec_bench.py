"""Speculative-decoding benchmark (Algorithm 2; DESIGN.md sec. 7 protocol): verify cost and SSM-layer tokens/s.

Run on a GPU with ``python3 scripts/gpu/spec_bench.py --out DIR`` (one device call, a few minutes). Per
(family, spec, batch) it times, with the decode benchmark's machinery (:mod:`.bench`: slot groups whose states
together exceed 4x L2, one CUDA graph per timed function, median of ``triton.testing.do_bench``):

* ``replay_step_us``: one standard replay decode step (averaged over L steps, one flush; :func:`.bench.bench_kernel`);
* ``conv_step_us``: one conventional step of the spec's conventional counterpart (:func:`conventional_spec`);
* ``verify_us`` (per T in 2, 4, 8 and acceptance rate): one replay ``verify(T)`` + ``commit`` round, averaged over
  ``L`` rounds per slot group (so over whole windows, flushes included);
* ``conv_verify_us`` (per T): one round of the conventional snapshot baseline (T snapshots written, the accepted
  one restored), whose cost does not depend on the acceptance;
* ``verify_only_us`` (per T): the replay verify alone (output-only: one read of the read copy for T tokens; the
  round's commit adds the flush, once per L committed tokens, i.e. once per L / T rounds at full acceptance).

Acceptance rate p: the fraction of the ``T - 1`` drafts accepted; a row commits ``1 + p (T - 1)`` tokens per round
on average (rows get the floor or the ceiling, spread evenly). SSM-layer tokens/s = committed tokens per round
x batch / round time; plain replay decoding commits one token per row per step.

Writes ``results.partial.csv`` as it goes (``--resume`` keeps it), then ``results.csv`` (one row per timing),
``summary.csv`` (one row per (family, spec, batch, T): ratios and tokens/s), ``correctness.csv`` (fp32 verify on
the device against the float64 oracle) and ``report.md``. ``--cpu-smoke``: tiny shapes in the interpreter.
"""

from __future__ import annotations

import datetime
import os
import time

import torch

from .bench import SHAPES, Timer, _device_and_shapes, _fill_states, bench_inputs, bench_kernel, rotation, step_keys
from .bench_report import markdown_table, run_header, shape_key_group, shape_key_heads
from .inputs import random_decode_inputs
from .naive import oracle_sequence
from .state_cache import SSMStateCache

SPECS = ["fp32", "nvfp4/fp16"]
BATCHES = [1, 64, 256, 512]
DRAFTS = [2, 4, 8]
RATES = [0.5, 0.75, 1.0]
CPU_SMOKE = dict(specs=["fp32"], batches=[2], drafts=[2], rates=[0.5, 1.0], window=4)
NAMES = ("q", "k", "v", "g", "beta")


def conventional_spec(spec: str) -> str:
    """The conventional counterpart of a spec: itself when shared, else its recurrence format (``nvfp4/fp16`` ->
    ``fp16``: conventional decoding keeps one checkpoint)."""
    from replayssm_quant.quant import parse_state_spec

    sp = parse_state_spec(spec)
    return sp.text if sp.shared else sp.recur.name + ("+sr" if sp.sr else "")


def accepted_counts(T: int, rate: float, B: int, device) -> torch.Tensor:
    """int32 ``[B]``: tokens committed per row for acceptance ``rate`` of the ``T - 1`` drafts, ``1 + rate (T - 1)``
    on average (each row the floor or the ceiling, spread evenly over the rows)."""
    m = 1 + rate * (T - 1)
    i = torch.arange(B, dtype=torch.float64)
    a = torch.floor((i + 1) * m) - torch.floor(i * m)
    return a.clamp(1, T).to(torch.int32).to(device)


def spec_inputs(family, batch, T, shape, device):
    """``T`` tokens of :data:`.bench.ACT_DTYPE` inputs per row as verify takes them (``[B, T, ...]``; keys as
    :func:`.bench.bench_inputs` gives them: ``k`` per value head, ``k_heads`` per key head)."""
    x = bench_inputs(family, batch, shape, T, device)
    return {n: (None if t is None else t.transpose(0, 1).contiguous()) for n, t in x.items()}


def time_rounds(family, spec, mode, batch, T, rate, shape, window, timer, device, x, max_draft=None,
                commit=True, knobs=None, shared_keys=True) -> float:
    """Microseconds per ``verify(T)`` + ``commit`` round of one slot group (``mode`` replay or conventional),
    averaged over ``window`` rounds (replay) or one (conventional: every round costs the same) per group, on a cache
    of ``max_draft`` (default T; the benchmark uses its largest T for all, so the step kernels of the commit's flush
    compile once). ``commit=False``: the verify alone (it moves no pointer, so every call does the same work).
    ``knobs``: a :class:`.launch.LaunchKnobs` for the cache (the verify launch's ``block_v`` / ``verify_warps``).
    ``shared_keys``: the cache keeps one key per key head of the shape, as the models have them (else one per value
    head)."""
    md = max_draft or T
    hk = shape_key_heads(shape, shared_keys)
    probe = SSMStateCache(family, spec, 1, shape["num_heads"], shape["head_k"], shape["head_v"], window=window,
                          mode=mode, backend="torch", max_draft=md, num_key_heads=hk)
    R = rotation(probe.bytes_per_slot(), batch) if device.type == "cuda" else 1
    cache = SSMStateCache(family, spec, batch * R, shape["num_heads"], shape["head_k"], shape["head_v"],
                          window=window, mode=mode, device=device, backend="triton", seed=1234, max_draft=md,
                          knobs=knobs, num_key_heads=hk)
    k = step_keys(cache, x)
    _fill_states(cache, 7)
    groups = [torch.arange(r * batch, (r + 1) * batch, device=device, dtype=torch.int32) for r in range(R)]
    out = torch.empty(batch, T, cache.num_heads, cache.head_v, dtype=torch.float32, device=device)
    acc = accepted_counts(T, rate, batch, device)
    rounds = window if mode == "replay" else 1

    def fn():
        for _ in range(rounds):
            for idx in groups:
                cache.verify(idx, x["q"], k, x["v"], x["g"], x["beta"], out=out, validate=False)
                if commit:
                    cache.commit(idx, acc, validate=False)

    us = timer(fn) * 1e3 / (rounds * R)
    ok = bool(torch.isfinite(out).all())
    del cache, out
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if not ok:
        raise RuntimeError(f"non-finite verify outputs: {family} {spec} {mode} B={batch} T={T}")
    return us


def correctness(family, shape, window, device, T=4, rows=3, rounds=12, knobs=None, shared_keys=True) -> dict:
    """fp32 replay verify / commit on the device against the float64 oracle: the largest relative error of the
    verify outputs (every token) and of the committed state after the last round (``knobs``: the cache's
    :class:`.launch.LaunchKnobs`; ``shared_keys``: the cache keeps the shape's key heads, the oracle gets each key
    repeated for its value heads)."""
    HV, K, V = shape["num_heads"], shape["head_k"], shape["head_v"]
    hg = shape_key_group(shape) if shared_keys else 1
    c = SSMStateCache(family, "fp32", rows, HV, K, V, window=window, device=device, backend="triton",
                      max_draft=T, knobs=knobs, num_key_heads=HV // hg)
    gen = torch.Generator().manual_seed(5)
    S = torch.randn(rows, HV, V, K, generator=gen) * 0.3
    idx = torch.arange(rows, device=device)
    c.load_state(idx, S.to(device))
    S = S.double().to(device)
    err = 0.0
    for r in range(rounds):
        x = random_decode_inputs(family, T, rows, HV, K, V, generator=gen, device=device)
        k_heads = x["k"][:, :, ::hg]                                    # [T, rows, HK, K]: the cache's keys
        x["k"] = c.value_head_keys(k_heads)                             # the oracle's: repeated per value head
        xv = {n: None if t is None else t.transpose(0, 1).contiguous() for n, t in x.items()}
        xv["k"] = k_heads.transpose(0, 1).contiguous()
        o = c.verify(idx, *(xv[n] for n in NAMES))
        o_ref, s_ref = oracle_sequence(family, S, *(x[n] for n in NAMES))
        err = max(err, ((o.double() - o_ref.transpose(0, 1)).abs().max() / o_ref.abs().max()).item())
        a = torch.tensor([(r + i) % T + 1 for i in range(rows)], device=device)
        c.commit(idx, a)
        S = s_ref[a - 1, torch.arange(rows, device=device)]
    st = c.state(idx).double()
    return dict(family=family, verify_rel_err=err, state_rel_err=((st - S).abs().max() / S.abs().max()).item(),
                flushes=int(c.flush_count[:rows].min()) - 1)


def verify_tile_sweep(out, families=("mamba2", "gdn", "kda"), specs=("fp32",), batch=256, T=8,
                      block_vs=(16, 32, 64), warps=(4, 8, 16), dots=("ieee",), splits=(1,), rep_ms=15,
                      cpu_smoke=False, shared_keys=True):
    """The replay verify alone (``verify_only``, T tokens) timed over V-block sizes x programs per head x warps per
    program x dot precisions, each config through the ``block_v`` / ``verify_split`` / ``verify_warps`` /
    ``verify_dot`` knobs (``None``: the default rule); for every config the fp32 verify's error against the float64
    oracle too (:func:`correctness`: "ieee" is the same arithmetic whatever the tiles, "tf32x3" is not). Writes
    ``OUT/verify_sweep.csv`` as it goes and returns the table (one row per config: family, spec, block_v, split,
    warps, dot, time_us, verify_rel_err, over_best)."""
    import pandas as pd
    from tqdm import tqdm

    from .launch import LaunchKnobs

    device, shapes = _device_and_shapes(cpu_smoke, list(families))
    window = CPU_SMOKE["window"] if cpu_smoke else 16
    batch, T = (2, 2) if cpu_smoke else (batch, T)
    timer = Timer(device, rep_ms)
    todo = [(f, s, bv, sp, w, d) for f in families for s in specs for bv in block_vs for sp in splits for w in warps
            for d in dots]
    for t in todo:   # every knob set checked before anything is written or timed
        LaunchKnobs(block_v=t[2], verify_split=t[3], verify_warps=t[4], verify_dot=t[5])
    os.makedirs(out, exist_ok=True)
    rows = []
    inputs = {f: spec_inputs(f, batch, T, shapes[f], device) for f in families}
    for fam, spec, bv, sp, w, dot in tqdm(todo, desc="verify sweep"):
        shape, x = shapes[fam], inputs[fam]
        knobs = LaunchKnobs(block_v=bv, verify_split=sp, verify_warps=w, verify_dot=dot)
        try:
            us = time_rounds(fam, spec, "replay", batch, T, 1.0, shape, window, timer, device, x, commit=False,
                             knobs=knobs, shared_keys=shared_keys)
            err = correctness(fam, shape, window, device, knobs=knobs, shared_keys=shared_keys)["verify_rel_err"]
        except Exception as e:   # a config that does not compile or run is a result too
            us = err = float("nan")
            print(f"verify sweep: {fam} {spec} block_v={bv} split={sp} warps={w} dot={dot}: {type(e).__name__}: "
                  f"{str(e)[:200]}")
        rows.append(dict(family=fam, spec=spec, batch=batch, T=T, block_v=bv or "default", split=sp or "default",
                         warps=w or "default", dot=dot or "default", time_us=us, verify_rel_err=err))
        pd.DataFrame(rows).to_csv(os.path.join(out, "verify_sweep.csv"), index=False)
    df = pd.DataFrame(rows)
    df["over_best"] = df["time_us"] / df.groupby(["family", "spec"])["time_us"].transform("min")
    df.to_csv(os.path.join(out, "verify_sweep.csv"), index=False)
    return df


def sweep_knobs(path: str, max_err: float = 1e-5) -> dict:
    """The fastest config per family of a :func:`verify_tile_sweep` CSV among those whose fp32 verify is within
    ``max_err`` of the float64 oracle: ``{family: LaunchKnobs}`` (a family with no such row is left out)."""
    import pandas as pd

    from .launch import LaunchKnobs

    df = pd.read_csv(path)
    df = df[df["time_us"].notna() & (df["verify_rel_err"] <= max_err)]
    out = {}
    for fam, g in df.groupby("family"):
        r = g.loc[g["time_us"].idxmin()]
        num = lambda c: None if str(r.get(c, "default")) == "default" else int(r[c])   # noqa: E731
        out[fam] = LaunchKnobs(block_v=num("block_v"), verify_split=num("split"), verify_warps=num("warps"),
                               verify_dot=None if str(r["dot"]) == "default" else str(r["dot"]))
    return out


def _summary(df):
    """One row per (family, spec, batch, T): verify cost ratios and tokens/s per acceptance rate."""
    import pandas as pd

    rows = []
    keys = ["family", "spec", "batch"]
    for (fam, spec, b), d in df.groupby(keys, sort=False):
        one = lambda kind, T=0, rate=1.0: d[(d.kind == kind) & (d["T"] == T) & (d.rate == rate)].time_us  # noqa
        rs, cs = one("replay_step"), one("conv_step")
        if not len(rs) or not len(cs):
            continue
        rs, cs = float(rs.iloc[0]), float(cs.iloc[0])
        for T in sorted(set(d["T"]) - {0}):
            v, cv = one("verify", T), one("conv_verify", T)
            if not len(v) or not len(cv):
                continue
            v, cv = float(v.iloc[0]), float(cv.iloc[0])
            vo = one("verify_only", T)
            vo = float(vo.iloc[0]) if len(vo) else float("nan")
            row = dict(family=fam, spec=spec, conv_spec=conventional_spec(spec), batch=b, T=T, replay_step_us=rs,
                       conv_step_us=cs, verify_us=v, verify_only_us=vo, conv_verify_us=cv,
                       verify_over_replay_step=v / rs, verify_only_over_replay_step=vo / rs,
                       verify_over_conv_step=v / cs, conv_verify_over_conv_step=cv / cs,
                       replay_tok_per_s=b / rs * 1e6)
            for rate in sorted(set(d.rate)):
                vr = one("verify", T, rate)
                if not len(vr):
                    continue
                a = float(accepted_counts(T, rate, b, "cpu").double().mean())
                tr, tc = b * a / float(vr.iloc[0]) * 1e6, b * a / cv * 1e6
                p = int(round(100 * rate))
                row.update({f"spec_tok_per_s_{p}": tr, f"conv_spec_tok_per_s_{p}": tc, f"speedup_{p}": tr / tc})
            rows.append(row)
    return pd.DataFrame(rows)


def _targets(summary) -> list[str]:
    lines = []
    for _, r in summary[(summary.batch == 256) & (summary["T"] == 8)].iterrows():
        line = (f"- {r.family} {r.spec} B=256 T=8: replay verify + commit = {r.verify_over_replay_step:.2f}x a replay "
                f"step{' (target <= 1.2x; the seed 0.89-1.21x)' if r.spec == 'fp32' else ''} (verify alone "
                f"{r.verify_only_over_replay_step:.2f}x), conventional snapshot "
                f"verify = {r.conv_verify_over_conv_step:.2f}x a conventional step (the seed: 4.66x)")
        if "speedup_50" in r:
            line += (f"; tokens/s replay / conventional speculation at 50/75/100% acceptance = "
                     f"{r.get('speedup_50', float('nan')):.2f}x / {r.get('speedup_75', float('nan')):.2f}x / "
                     f"{r.get('speedup_100', float('nan')):.2f}x (target >= 1.8x)")
        lines.append(line)
    return lines


def run_spec_bench(out, families=None, specs=None, batches=None, drafts=None, rates=None, window=None, rep_ms=40,
                   cpu_smoke=False, resume=False, command=None, budget_s=None, knobs=None, shared_keys=True):
    """Run the benchmark (module doc) into ``out``; returns the summary DataFrame. Batch 256 is timed first, then
    the others; ``budget_s`` (default 270 on the GPU): no new measurement starts after that many seconds (the report
    lists what was left out; ``--resume`` in the same folder continues). ``knobs``: ``{family: LaunchKnobs}`` for
    the replay caches (e.g. :func:`sweep_knobs`; others: the defaults). ``shared_keys``: every cache (steps and
    verify rounds alike) keeps one key per key head of the shape, as the models do (default), else one per value
    head."""
    import pandas as pd
    from tqdm import tqdm

    families = families or list(SHAPES)
    for f in families:
        if f not in SHAPES:
            raise ValueError(f"unknown family {f!r}; valid: {', '.join(SHAPES)}")
    d = CPU_SMOKE if cpu_smoke else dict(specs=SPECS, batches=BATCHES, drafts=DRAFTS, rates=RATES, window=16)
    specs, batches, drafts = specs or d["specs"], batches or d["batches"], drafts or d["drafts"]
    rates, window = rates or d["rates"], window or d["window"]
    for T in drafts:
        if not 1 <= T <= window:
            raise ValueError(f"draft length T={T}: allowed 1..{window} (the window)")
    for p in rates:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"acceptance rate {p}: allowed 0..1")
    for s in specs:
        conventional_spec(s)   # bad specs fail here
    device, shapes = _device_and_shapes(cpu_smoke, families)
    timer = Timer(device, rep_ms)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    corr, errors = [], []
    for f in families:
        try:
            corr.append(correctness(f, shapes[f], window, device, shared_keys=shared_keys))
        except Exception as e:   # a one-call GPU run reports what failed and times the rest
            errors.append(f"correctness {f}: {type(e).__name__}: {str(e)[:300]}")
    corr = pd.DataFrame(corr)
    corr.to_csv(os.path.join(out, "correctness.csv"), index=False)
    partial = os.path.join(out, "results.partial.csv")
    rows = pd.read_csv(partial).to_dict("records") if resume and os.path.exists(partial) else []
    done = {(r["family"], r["spec"], int(r["batch"]), r["kind"], int(r["T"]), float(r["rate"])) for r in rows}
    budget_s = budget_s if budget_s is not None else (1e9 if cpu_smoke else 270)
    todo = []
    for b in sorted(batches, key=lambda b: (b != 256, b)):
        for fam in families:
            for spec in specs:
                todo += [(fam, spec, b, "replay_step", 0, 1.0), (fam, spec, b, "conv_step", 0, 1.0)]
                for T in drafts:
                    todo += [(fam, spec, b, "verify", T, p) for p in rates] + [(fam, spec, b, "conv_verify", T, 1.0),
                                                                               (fam, spec, b, "verify_only", T, 1.0)]
    todo = [t for t in todo if t not in done]
    x_key, x, left = None, None, []
    for fam, spec, b, kind, T, p in tqdm(todo, desc="spec bench", disable=False if cpu_smoke else None):
        if time.time() - t0 > budget_s:
            left.append((fam, spec, b, kind, T, p))
            continue
        shape = shapes[fam]
        step = kind in ("replay_step", "conv_step")
        mode, sp = ("conventional", conventional_spec(spec)) if kind in ("conv_step", "conv_verify") else \
            ("replay", spec)
        try:
            if x_key != (fam, b, 0 if step else T):
                x_key = (fam, b, 0 if step else T)
                x = bench_inputs(fam, b, shape, window, device) if step else spec_inputs(fam, b, T, shape, device)
            if step:
                us = bench_kernel(fam, sp, mode, b, shape, window, timer, device, x, phases=("step",),
                                  shared_keys=shared_keys)["time_us"]
            else:
                kn = (knobs or {}).get(fam) if mode == "replay" else None
                us = time_rounds(fam, sp, mode, b, T, p, shape, window, timer, device, x, max_draft=max(drafts),
                                 commit=kind != "verify_only", knobs=kn, shared_keys=shared_keys)
        except Exception as e:   # recorded; the run goes on (a one-call GPU run keeps what it can measure)
            errors.append(f"{fam} {sp} {kind} B={b} T={T} p={p}: {type(e).__name__}: {str(e)[:300]}")
            x_key, us = None, float("nan")
            if device.type == "cuda":
                torch.cuda.empty_cache()
        rows.append(dict(family=fam, spec=spec, batch=b, kind=kind, T=T, rate=p, mode=mode, timed_spec=sp,
                         time_us=us))
        pd.DataFrame(rows).to_csv(partial, index=False)
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(out, "results.csv"), index=False)
    summary = _summary(df) if len(df) else pd.DataFrame()   # (a budget spent before the first measurement)
    summary.to_csv(os.path.join(out, "summary.csv"), index=False)
    cols = ["family", "spec", "conv_spec", "batch", "T", "replay_step_us", "conv_step_us", "verify_us",
            "verify_only_us", "conv_verify_us", "verify_over_replay_step", "verify_only_over_replay_step",
            "verify_over_conv_step", "conv_verify_over_conv_step"]
    tps = [c for c in summary.columns if c.startswith(("spec_tok", "conv_spec_tok", "speedup"))]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Speculative decoding (Algorithm 2): verify cost and SSM-layer throughput", "",
             *(run_header(device) if command is None else [f"- command: `{command}`", f"- date: {date}"]),
             f"- window L = {window}; shapes: " + "; ".join(f"{f}: {shapes[f]['note']}" for f in families),
             "- verify_us: one replay verify(T) + commit round at 100% acceptance, averaged over L rounds (whole "
             "windows, flushes included); verify_only_us: the verify alone; conv_verify_us: one round of the "
             "conventional snapshot baseline (T "
             "snapshots, the accepted one restored), of conv_spec; steps: one decode step (replay: averaged over L "
             "steps).", "- acceptance p: fraction of the T - 1 drafts accepted (a row commits 1 + p (T - 1) tokens "
             "per round); tokens/s: committed SSM-layer tokens per second.",
             f"- replay and conventional caches of max_draft = {max(drafts)} (the largest T) for every T",
             "- keys: " + ("one per key head of the shape, as the models have them (steps and verify rounds alike)"
                           if shared_keys else "one per value head (`--keys per-head`)"),
             *(["- replay launch knobs: " + "; ".join(f"{f}: {k.overrides()}" for f, k in knobs.items())] if knobs else []),
             f"- wall time {time.time() - t0:.0f} s"
             + (f"; time budget {budget_s:.0f} s reached: {len(left)} measurements not run (first: {left[0]}); "
                "rerun with --resume into the same --out to add them" if left else ""),
             *([f"- {len(errors)} failures (NaN rows): " + "; ".join(errors[:10])] if errors else []),
             "", "## Targets (H200, B = 256)", "",
             *((_targets(summary) if len(summary) else []) or ["- (no B = 256, T = 8 rows in this run)"]), "",
             "## Verify cost", "",
             markdown_table(summary[cols], ".3g") if len(summary) else "(none)", "",
             "## SSM-layer tokens/s by acceptance rate", "",
             markdown_table(summary[["family", "spec", "batch", "T", "replay_tok_per_s"] + tps], ".4g")
             if len(summary) else "(none)", "", "## Device correctness (fp32 verify vs float64 oracle)", "",
             markdown_table(corr, ".2e") if len(corr) else "(failed)", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))
    if not left:
        os.remove(partial)
    print("\n".join(lines))
    return summary
