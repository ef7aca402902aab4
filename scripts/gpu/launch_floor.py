"""Launch-latency floor of a batch-1 decode step (GPU): what do launches and a slot-dependent state read cost
under CUDA graphs, timed as the bench times a step?

Each variant is one decode "step" of stand-in kernels, repeated L x R times in one CUDA graph (R slots of one
gdn row's fp32 state, 32 heads x 128 x 128 = 2 MiB each, so the R states exceed the L2 as the bench's slot
groups do) and timed with ``kernels.bench.Timer`` (do_bench median of graph replays) / (L R):

* ``empty``: a kernel that does nothing, on 1 program or on the fused batch-1 grid (4 V-blocks x 32 heads);
* ``+ advance``: a second launch per step (1 program), as the ring-counter advance (``_advance_kernel``) was before the fused step took it over (a split step still has it);
* ``read``: each program loads the slot index, then the slot's ring count, then (after both, as a decode step)
  its ``[BV, K]`` fp32 tile of the slot's state and stores ``S q`` (2 MiB read per step);
* ``read+write``: the same and the tile written back (a conventional step's 4 MiB), on BV = 32 and 16 rows.

Prints us per step and GB/s of the state bytes, writes ``OUT/launch_floor.csv`` / ``.md``.

    source scripts/gpu/setup.sh && python3 scripts/gpu/launch_floor.py --out "$OUT/floor"

``--cpu-smoke`` (``TRITON_INTERPRET=1``): tiny shapes in the interpreter, the read kernels' outputs checked
against torch (a check that the script runs, not a measurement).
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd
import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench import Timer  # noqa: E402
from replayssm_quant.kernels.bench_report import L2_BYTES, write_table  # noqa: E402


@triton.jit
def _empty_kernel(x_ptr, n):
    """Does nothing (a store no program reaches: ``n`` is 0)."""
    pid = tl.program_id(0)
    if pid < n:
        tl.store(x_ptr + pid, 0)


@triton.jit
def _slot_read_kernel(S_ptr, idx_ptr, cnt_ptr, q_ptr, out_ptr, HV, L, K: tl.constexpr, V: tl.constexpr,
                      BV: tl.constexpr, WRITE: tl.constexpr):
    """Program (V-block, head) of row 0: slot = idx[0], h = cnt[slot]; if h < L: o = S[slot, head] q over its
    ``[BV, K]`` tile (fp32) into ``out[head, v]``; WRITE: the tile times 0.5 back into S."""
    pv = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(idx_ptr).to(tl.int64)
    h = tl.load(cnt_ptr + slot)
    offs_v = pv * BV + tl.arange(0, BV)
    offs_k = tl.arange(0, K)
    if h < L:
        ptrs = S_ptr + (slot * HV + head) * V * K + offs_v[:, None] * K + offs_k[None, :]
        S = tl.load(ptrs)
        q = tl.load(q_ptr + head * K + offs_k)
        tl.store(out_ptr + head * V + offs_v, tl.sum(S * q[None, :], 1))
        if WRITE:
            tl.store(ptrs, S * 0.5)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--window", type=int, default=16, help="steps per slot in the graph (the bench's L)")
    p.add_argument("--rep-ms", type=int, default=40)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes in the Triton interpreter (TRITON_INTERPRET=1)")
    a = p.parse_args(argv)
    if a.window < 1 or a.rep_ms < 1:
        p.error(f"--window {a.window} and --rep-ms {a.rep_ms}: both must be >= 1")
    if a.cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("launch_floor: --cpu-smoke needs TRITON_INTERPRET=1")
        dev, HV, V, K, R, L = torch.device("cpu"), 2, 32, 32, 2, 2
    elif not torch.cuda.is_available():
        sys.exit("launch_floor: needs a CUDA device")
    else:
        dev, HV, V, K, L = torch.device("cuda"), 32, 128, 128, a.window
        R = min(64, -(-4 * L2_BYTES // (HV * V * K * 4)))   # the bench's rotation for one row's fp32 state
    os.makedirs(a.out, exist_ok=True)
    timer = Timer(dev, a.rep_ms)
    gen = torch.Generator(device=dev).manual_seed(3)
    S = torch.randn(R, HV, V, K, device=dev, generator=gen)
    S0 = S.clone() if a.cpu_smoke else None
    q = torch.randn(HV, K, device=dev, generator=gen)
    out = torch.empty(HV, V, device=dev)
    idx = torch.arange(R, device=dev, dtype=torch.int32)
    cnt = torch.zeros(R, device=dev, dtype=torch.int32)
    dummy = torch.zeros(1, device=dev, dtype=torch.int32)
    slot_idx = [idx[r:r + 1] for r in range(R)]
    state_mb = HV * V * K * 4 / 1e6
    rows = []

    def empty(grid):
        _empty_kernel[grid](dummy, 0, num_warps=4)

    def read(r, bv, write):
        _slot_read_kernel[(V // bv, HV)](S, slot_idx[r], cnt, q, out, HV, L, K=K, V=V, BV=bv, WRITE=write,
                                         num_warps=4)

    variants = [
        ("empty, 1 program", 0.0, lambda r: empty((1,))),
        ("empty, 4 x 32 programs", 0.0, lambda r: empty((4, HV))),
        ("empty, 4 x 32 programs + advance (1 program)", 0.0, lambda r: (empty((4, HV)), empty((1,)))),
        ("read (idx -> cnt -> tile), BV = 32", state_mb, lambda r: read(r, 32, False)),
        ("read, BV = 32 + advance", state_mb, lambda r: (read(r, 32, False), empty((1,)))),
        ("read+write, BV = 32", 2 * state_mb, lambda r: read(r, 32, True)),
        ("read+write, BV = 16", 2 * state_mb, lambda r: read(r, 16, True)),
        ("read+write, BV = 16 + advance", 2 * state_mb, lambda r: (read(r, 16, True), empty((1,)))),
    ]
    for name, mb, step in variants:
        def fn(step=step):
            for _ in range(L):
                for r in range(R):
                    step(r)
        us = timer(fn) * 1e3 / (L * R)
        rows.append(dict(variant=name, launches_per_step=2 if "advance" in name else 1, state_MB=mb, us_per_step=us,
                         GBps=mb * 1e6 / (us * 1e-6) / 1e9 if mb else float("nan")))
        pd.DataFrame(rows).to_csv(os.path.join(a.out, "launch_floor.csv"), index=False)
        if a.cpu_smoke and mb:   # the last slot's output: S q (the state as the last step left it)
            torch.testing.assert_close(out, (S[R - 1] @ q[:, :, None]).squeeze(-1) * (2.0 if "write" in name else 1.0))
    if a.cpu_smoke:
        assert torch.equal(S, S0 * 0.5 ** (3 * L)), "read+write variants: every tile written back once per step"
    print(write_table(a.out, "launch_floor", f"Batch-1 launch floor under CUDA graphs ({L} x {R} steps per graph, "
                      f"{state_mb:.1f} MB fp32 state per slot)", pd.DataFrame(rows), dev, floatfmt=".3g"))


if __name__ == "__main__":
    main()
