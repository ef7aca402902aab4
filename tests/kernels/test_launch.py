"""Launch planning (kernels.launch): the heuristics of plan_step, checked without a GPU on stand-in caches.

A stand-in is what plan_step reads of an SSMStateCache (family, spec, window, sizes, device, knobs), typed as a
CUDA device with 132 SMs (the H200) where a test patches ``launch._num_sms``.
"""

from types import SimpleNamespace

import pytest
import torch

from replayssm_quant.kernels import decode, launch
from replayssm_quant.kernels.bench import parse_knobs
from replayssm_quant.kernels.launch import LaunchKnobs
from replayssm_quant.quant import parse_state_spec


def pick(plan, *names):
    """The named fields of a plan, as a tuple."""
    return tuple(getattr(plan, n) for n in names)


def _standin(spec, window=16, V=128, K=128, HV=32, family="gdn", device="cuda", **knobs):
    return SimpleNamespace(head_v=V, head_k=K, num_heads=HV, window=window, spec=parse_state_spec(spec),
                           device=torch.device(device), family=family, per_key=family == "kda",
                           knobs=LaunchKnobs(**knobs))


def test_step_plan_heuristic(monkeypatch):
    """plan_step: the GPU launcher's tiles (checked without a GPU: a cuda-typed stand-in cache, 132 SMs)."""
    monkeypatch.setattr(launch, "_num_sms", lambda device: 132)

    def cfg(spec, window, batch, family="gdn", **knobs):
        return launch.plan_step(_standin(spec, window=window, family=family, **knobs), batch)

    # replay, large grid: 4096-element tiles, flush launch capped, split into non-flush + flush launches
    assert pick(cfg("fp32", 16, 256), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (32, 16, 4, False, 128, True)
    assert pick(cfg("nvfp4/fp16", 16, 256), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (32, 16, 4, True, 128, True)    # every family and spec splits
    assert cfg("fp8/fp16", 16, 256).split is True and cfg("fp32", 16, 256, family="mamba2").split is True
    assert cfg("fp32", 16, 256, family="kda").split is True
    assert pick(cfg("fp32", 16, 1), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (16, 16, 4, False, None, False)     # batch 1: fine split, no cap, one launch
    assert cfg("fp32", 16, 1, family="kda").block_v == 32                 # kda: V-blocks of >= 32 rows
    assert cfg("fp32", 1, 1, family="kda").block_v == 8                   # (conventional: unchanged)
    assert pick(cfg("fp32", 1, 256), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (64, 32, 8, False, None, False)    # conventional: unchanged 8192 tiles
    # conventional 16- / 8-bit checkpoints: one sub-block per program; 16-bit with per-key decays or V <= 64: 4096
    assert pick(cfg("fp16", 1, 256), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (64, 64, 8, False, None, False) and pick(cfg("fp8+sr", 1, 256), "block_v", "flush_block_v", "num_warps") == (64, 64, 8)
    assert pick(cfg("fp16", 1, 256, family="kda"), "block_v", "flush_block_v", "num_warps") == (32, 32, 4) and pick(cfg("fp8", 1, 256, family="kda"), "block_v", "flush_block_v") == (64, 64)
    assert pick(cfg("fp16", 1, 256, flush_block_v=16), "block_v", "flush_block_v") == (64, 16) and pick(cfg("bf16", 1, 1), "block_v", "flush_block_v") == (8, 8)
    assert cfg("fp8+sr", 1, 256).maxnreg == 80 and cfg("fp8", 1, 256).maxnreg is None    # SR into 8 bits: 3 programs per SM
    assert cfg("fp8+sr", 1, 256, maxnreg=0).maxnreg is None and cfg("fp16+sr", 1, 256).maxnreg is None
    assert pick(cfg("fp32", 16, 256, block_v=64), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (64, 32, 8, False, 128, True)
    assert pick(cfg("fp32", 16, 256, block_v=64, maxnreg=0), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (64, 32, 8, False, None, True)
    assert pick(cfg("fp32", 16, 256, maxnreg=96), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (32, 16, 4, False, 96, True)
    # replay programs of fewer rows than the flush's 16 (a knob): one warp each (uncapped: the cap is for 4-warp
    # programs), flushing in groups of programs; a warps knob still holds
    assert pick(cfg("fp32", 16, 1, block_v=8), "block_v", "flush_block_v", "num_warps", "maxnreg") == (8, 16, 1, None)
    assert pick(cfg("nvfp4/fp16", 16, 256, block_v=8), "block_v", "flush_block_v", "num_warps", "maxnreg") == (8, 16, 1, None)
    assert pick(cfg("fp32", 16, 2, block_v=8, num_warps=4), "block_v", "flush_block_v", "num_warps", "maxnreg") == (8, 16, 4, 128)
    assert pick(cfg("fp32", 16, 1, block_v=4), "block_v", "flush_block_v") == (4, 16)
    # the fused step advances its counters itself on grids of <= 8 programs per SM; larger grids and split steps
    # launch _advance_kernel; the step_advance knob forces a fused grid either way
    assert cfg("fp32", 16, 1).step_advance is True and cfg("fp32", 1, 1).step_advance is True
    assert cfg("fp32", 1, 64).step_advance is False and cfg("fp32", 1, 256).step_advance is False
    assert cfg("fp32", 1, 16).step_advance is True and cfg("fp32", 1, 32).step_advance is False   # 1024 / 2048 programs
    assert cfg("fp32", 16, 256).step_advance is False and cfg("fp32", 16, 1, split_flush=True).step_advance is False
    assert cfg("fp32", 1, 256, step_advance=True).step_advance is True
    assert cfg("fp32", 16, 1, step_advance=False).step_advance is False
    assert launch.plan_step(_standin("fp32", window=16, device="cpu"), 256).step_advance is True   # interpreter
    # where it advances them, the arrival's reply waits in one thread for the program's end (arrive_lanes = its
    # threads) on conventional grids (window 1), and reaches every thread at the atomic on replay ones (0)
    conv, rep = cfg("fp32", 1, 1), cfg("fp32", 16, 1)
    assert conv.arrive_lanes == 32 * conv.num_warps > 0 and rep.arrive_lanes == 0
    assert cfg("fp32", 1, 256).arrive_lanes == 0 and cfg("fp32", 1, 256, arrive_deferred=True).arrive_lanes == 0
    assert cfg("fp32", 16, 1, arrive_deferred=True).arrive_lanes == 32 * rep.num_warps
    assert cfg("fp32", 1, 1, arrive_deferred=False).arrive_lanes == 0
    assert cfg("fp32", 16, 1, num_warps=8, arrive_deferred=True).arrive_lanes == 256
    # the split_flush knob forces it either way; conventional never splits
    assert cfg("fp32", 16, 256, split_flush=False).split is False
    assert cfg("fp32", 16, 1, split_flush=True).split is True
    assert cfg("fp32", 1, 256, split_flush=True).split is False
    assert cfg("fp32", 16, 2).split is False     # BV = 16: 2 * 32 * 8 = 512 programs: capped, not split (<= 8 per SM)
    assert cfg("fp32", 16, 2).maxnreg == 128
    m2 = _standin("fp32", V=64, HV=128, family="mamba2")   # Nemotron-H: batch 1 is 512 programs
    assert pick(launch.plan_step(m2, 1), "maxnreg", "split") == (128, False) and launch.plan_step(m2, 8).split is True
    m2.window, m2.spec = 1, parse_state_spec("fp16")
    assert pick(launch.plan_step(m2, 256), "block_v", "flush_block_v", "num_warps") == (32, 32, 4)   # conventional fp16, V = 64: 4096-element tiles
    m2.spec = parse_state_spec("nvfp4+sr")   # conventional nvfp4: whole-head 8-warp programs, capped on large grids
    assert pick(launch.plan_step(m2, 256), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (64, 64, 8, True, 128, False)
    assert launch.plan_step(m2, 3).maxnreg == 128 and launch.plan_step(m2, 2).maxnreg is None   # 384 / 256 programs
    m2.knobs = LaunchKnobs(maxnreg=0)
    assert launch.plan_step(m2, 256).maxnreg is None                                          # the knob: no cap
    assert pick(cfg("nvfp4+sr", 1, 256), "block_v", "flush_block_v", "num_warps", "nvfp4", "maxnreg", "split") == (128, 128, 16, True, 128, False) and cfg("nvfp4", 1, 1).maxnreg is None
    assert cfg("fp32", 16, 16).split is True     # BV = 32: 16 * 32 * 4 = 2048 programs > 8 per SM


def test_nonflush_plan(monkeypatch):
    """The split step's non-flush launch: all V rows, four key chunks (KC = max(16, BK / 4)), a software-pipelined
    chunk loop (3 stages) for nvfp4 read copies and, on large grids, fp32 and 16-bit ones (and kda's 8-bit ones),
    2 warps for staged loops and compressed read copies, register prefetch of the unstaged fp32 / 8-bit loops, a
    register cap for the delta rule except kda's fp32 2-warp programs (H200 sweeps); the knobs override."""
    def cfg(spec, V=128, K=128, family="mamba2", batch=256, **knobs):
        return launch.plan_nonflush(_standin(spec, V=V, K=K, family=family, **knobs), batch)

    monkeypatch.setattr(launch, "_num_sms", lambda device: 132)   # the H200

    # staged key-chunk loop (3 stages, 2 warps for K = 128) for fp32, 16-bit and nvfp4 read copies
    assert pick(cfg("fp32"), "rows", "key_chunk", "prefetch", "num_warps", "maxnreg", "stages") == (128, 32, False, 2, None, 3)
    assert pick(cfg("fp8/fp16+sr"), "rows", "key_chunk", "prefetch", "num_warps", "maxnreg", "stages") == (128, 32, True, 2, None, 0) and cfg("fp8+sr").prefetch is True
    # register cap 128: the delta rule (gdn: any program; kda: 4+ warps, or staged 2-warp programs of a compressed
    # read copy), not mamba2; the knob overrides (0: none)
    kda, gdn = dict(family="kda"), dict(family="gdn")
    assert pick(cfg("fp32", **kda), "num_warps", "maxnreg", "stages") == (2, None, 3) and pick(cfg("fp16", **kda), "num_warps", "maxnreg", "stages") == (2, 128, 3)
    assert pick(cfg("fp32", nonflush_stages=0, **kda), "prefetch", "num_warps", "maxnreg", "stages") == (True, 4, 128, 0)
    assert pick(cfg("nvfp4/fp16", **kda), "num_warps", "maxnreg", "stages") == (2, 128, 3) and pick(cfg("nvfp4/fp16", **gdn), "num_warps", "maxnreg", "stages") == (2, 128, 3)
    assert pick(cfg("fp8+sr", **kda), "prefetch", "num_warps", "maxnreg", "stages") == (False, 2, 128, 3) and pick(cfg("fp8+sr", **gdn), "prefetch", "num_warps", "maxnreg", "stages") == (True, 2, 128, 0)
    assert pick(cfg("fp8+sr", batch=64, **kda), "num_warps", "maxnreg", "stages") == (2, None, 0)         # small grids: unstaged, uncapped
    assert pick(cfg("nvfp4/fp16", batch=64, **kda), "num_warps", "maxnreg", "stages") == (2, None, 0) and cfg("nvfp4/fp16", batch=64, **gdn).stages == 3
    assert pick(cfg("fp16", **gdn), "num_warps", "maxnreg", "stages") == (2, 128, 3) and cfg("fp32", **gdn).maxnreg == 128
    assert cfg("fp16").maxnreg is None and cfg("fp32", V=64).maxnreg is None                 # mamba2
    assert cfg("fp32", nonflush_maxnreg=0, nonflush_stages=0, **kda).maxnreg is None and cfg("fp16", nonflush_maxnreg=96).maxnreg == 96
    with pytest.raises(ValueError, match="nonflush_maxnreg=300: registers per thread, 24 to 255, or 0"):
        cfg("fp32", nonflush_maxnreg=300)
    assert cfg("fp16").num_warps == 2 and cfg("nvfp4/fp16").num_warps == 2 and pick(cfg("nvfp4/fp16", V=64), "num_warps", "maxnreg", "stages") == (2, None, 3)
    assert cfg("nvfp4/fp16", V=64, nonflush_stages=0).num_warps == 4     # unstaged nvfp4: 2 warps only for 4096 elements
    assert cfg("fp16").prefetch is False and cfg("nvfp4/fp16").prefetch is False and cfg("bf16/fp32").prefetch is False
    assert cfg("nvfp4/fp16", nonflush_prefetch=True, nonflush_stages=0).prefetch is True
    assert cfg("fp32", nonflush_prefetch=True).prefetch is False          # a staged loop has no register prefetch
    assert cfg("fp32", nonflush_prefetch=False, nonflush_stages=0).prefetch is False
    assert pick(cfg("fp32", V=64), "rows", "key_chunk", "prefetch", "num_warps", "maxnreg", "stages") == (64, 32, False, 2, None, 3)    # mamba2 heads
    assert pick(cfg("fp32", V=13, K=48), "rows", "key_chunk") == (16, 16)             # BK = 64: four chunks of 16
    assert pick(cfg("fp32", V=256, K=256), "rows", "key_chunk", "prefetch", "num_warps", "maxnreg", "stages") == (256, 64, False, 8, None, 3)
    assert pick(cfg("fp32", V=256, K=256, nonflush_stages=0), "rows", "key_chunk", "prefetch", "num_warps", "maxnreg", "stages") == (256, 64, True, 16, None, 0)
    assert cfg("nvfp4/fp16", nonflush_warps=8).num_warps == 8 and cfg("fp8+sr", nonflush_stages=2).stages == 2
    with pytest.raises(ValueError, match="nonflush_warps=3: a power of two"):
        cfg("fp32", nonflush_warps=3)
    # fp32 / 16-bit read copies staged from 32 programs per SM (B * HV >= 4224 here), nvfp4 at any batch
    assert cfg("fp32", batch=132).stages == 3 and pick(cfg("fp32", batch=131), "prefetch", "num_warps", "maxnreg", "stages") == (True, 4, None, 0)
    assert cfg("fp16", batch=64).stages == 0 and cfg("nvfp4/fp16", batch=1).stages == 3
    assert cfg("fp32", batch=16, nonflush_stages=2).stages == 2
    for bad in (9, -1, True, 2.0):
        with pytest.raises(ValueError, match="nonflush_stages=.*: pipeline stages of the key-chunk loop, 0 .none. to 8"):
            cfg("fp32", nonflush_stages=bad)
    # an nvfp4 read's E2M1 decode: the inline-PTX E4M3 image for the delta rule, integer operations for mamba2
    # (whose staged loop ptxas unrolls whole with the PTX decode, call s13b); no E2M1 decode without an nvfp4 read
    assert cfg("nvfp4/fp16").e2m1_ptx is False and cfg("nvfp4+sr", V=64).e2m1_ptx is False
    assert cfg("nvfp4/fp16", **gdn).e2m1_ptx is True and cfg("nvfp4/fp8+sr", **kda).e2m1_ptx is True
    assert cfg("nvfp4/fp16", nonflush_e2m1_ptx=True).e2m1_ptx is True
    assert cfg("nvfp4/fp16", nonflush_e2m1_ptx=False, **gdn).e2m1_ptx is False
    assert cfg("fp8+sr", **gdn).e2m1_ptx is False and cfg("fp32", nonflush_e2m1_ptx=True, **kda).e2m1_ptx is False
    with pytest.raises(ValueError, match="nonflush_e2m1_ptx='yes': true, false or none"):
        cfg("nvfp4/fp16", nonflush_e2m1_ptx="yes")


def test_flush_plan(monkeypatch):
    """The split step's flush launch: whole-head work items (flush terms once per (row, head)), S_L kept in scratch
    between the two passes of an nvfp4 flush; knobs override; bad values refused."""
    def cfg(spec, V=128, device="cpu", family="gdn", **knobs):
        return launch.plan_flush(_standin(spec, V=V, device=device, family=family, **knobs), 256)

    assert pick(cfg("fp32"), "item_rows", "sub_block_rows", "num_warps", "maxnreg", "scratch", "programs_per_sm",
                "stages") == (128, 16, 4, None, False, launch.FLUSH_PROGRAMS_PER_SM, 1)
    assert pick(cfg("fp32", V=64), "item_rows", "sub_block_rows", "num_warps", "maxnreg", "scratch") == (
        64, 16, 4, None, False) and cfg("fp32", V=13).item_rows == 16
    assert cfg("nvfp4/fp16").scratch is True
    assert cfg("nvfp4/fp16", V=16).scratch is False            # one sub-block holds the head: one pass, no scratch
    assert pick(cfg("fp16", flush_block_v=32), "item_rows", "sub_block_rows", "num_warps") == (128, 32, 4)
    # no software pipeline of the sub-block loop unless a checkpoint is nvfp4 (Triton's default there); the knob
    assert cfg("fp8+sr").stages == 1 and cfg("nvfp4+sr").stages is None and cfg("nvfp4+sr", flush_stages=1).stages == 1
    # a dual nvfp4 spec's split flush: on the GPU 3xTF32 dots (flush_dot_precision), no pipeline; with IEEE dots
    # (the default off the GPU) the default pipeline
    assert cfg("nvfp4/fp16", flush_dot="tf32x3").stages == 1 and cfg("nvfp4/fp16", flush_dot="ieee").stages is None
    assert cfg("nvfp4/fp16").stages is None
    assert cfg("nvfp4+sr", flush_dot="tf32x3").stages == 1 and cfg("nvfp4/fp32").stages is None
    assert cfg("fp32", flush_stages=3).stages == 3
    # the nvfp4 pass-1 items' dots: IEEE for a row-scaled 8-bit recurrence checkpoint with stochastic rounding
    # (call s17c), else the flush's, unless flush_items_dot says otherwise; IEEE for an fp32 checkpoint
    assert cfg("nvfp4/fp16", flush_dot="tf32x3").items_dot == "tf32x3" and cfg("nvfp4/fp16").items_dot == "ieee"
    for spec in ("nvfp4/fp8+sr", "nvfp4/int8+sr"):
        assert pick(cfg(spec, flush_dot="tf32x3"), "dot", "items_dot") == ("tf32x3", "ieee"), spec
        assert cfg(spec, flush_items_dot="tf32x3").items_dot == "tf32x3", spec
    for spec in ("nvfp4/fp8", "nvfp4/e4m3+sr"):   # no stochastic rounding / not row-scaled: the flush's
        assert pick(cfg(spec, flush_dot="tf32x3"), "dot", "items_dot") == ("tf32x3", "tf32x3"), spec
    assert pick(cfg("nvfp4/fp8", flush_dot="tf32x3", flush_items_dot="ieee"), "dot", "items_dot") == (
        "tf32x3", "ieee")
    assert cfg("nvfp4/fp16", flush_items_dot="tf32x3").items_dot == "tf32x3"
    assert cfg("nvfp4/fp32", flush_items_dot="tf32x3").items_dot == "ieee"
    with pytest.raises(ValueError, match="flush_items_dot='tf32': allowed 'ieee', 'tf32x3'"):
        cfg("nvfp4/fp16", flush_items_dot="tf32")
    # warps per flush program: fewer warps keep the warps per SM (more programs) unless the grid is set too; 64-row
    # sub-blocks (8192 elements) take 8 warps at the same 4 programs per SM
    assert pick(cfg("nvfp4/fp16", flush_warps=2), "num_warps", "programs_per_sm") == (2, 8)
    assert pick(cfg("nvfp4/fp16", flush_warps=1), "num_warps", "programs_per_sm") == (1, 16)
    assert pick(cfg("nvfp4/fp16", flush_warps=2, flush_programs_per_sm=5), "num_warps", "programs_per_sm") == (2, 5)
    assert pick(cfg("fp32", flush_programs_per_sm=3), "num_warps", "programs_per_sm") == (4, 3)
    assert pick(cfg("fp32", flush_block_v=64), "num_warps", "programs_per_sm") == (8, 4)
    for bad in (3, 0, 64, True):
        with pytest.raises(ValueError, match=f"flush_warps={bad!r}: a power of two from 1 to 32"):
            cfg("fp32", flush_warps=bad)
    for bad in (0, 33, False, 2.0):
        with pytest.raises(ValueError, match=f"flush_programs_per_sm={bad!r}: programs per SM of the persistent "
                                             "flush grid, 1 to 32"):
            cfg("fp32", flush_programs_per_sm=bad)
    # the pass-1 items' own warps: 2 for gdn with 3xTF32 items (nvfp4/fp16), else the flush's; fewer than 4: uncapped
    gpu = dict(device="cuda")
    with monkeypatch.context() as m:
        m.setattr(launch, "_num_sms", lambda device: 132)
        assert pick(cfg("nvfp4/fp16", **gpu), "items_dot", "items_warps", "items_maxnreg", "num_warps") == (
            "tf32x3", 2, None, 4)
        assert pick(cfg("nvfp4/fp8+sr", **gpu), "items_dot", "items_warps") == ("ieee", 4)
        assert pick(cfg("nvfp4/fp16", family="kda", **gpu), "items_warps", "items_maxnreg") == (4, 128)
        assert pick(cfg("nvfp4/fp16", family="mamba2", **gpu), "items_warps", "items_maxnreg") == (4, 128)
        assert pick(cfg("nvfp4/fp16", flush_items_warps=4, **gpu), "items_warps", "items_maxnreg") == (4, 128)
    assert cfg("nvfp4/fp16").items_warps == 4   # (the interpreter's IEEE items)
    assert pick(cfg("nvfp4/fp16", flush_items_warps=2), "items_warps", "items_maxnreg", "num_warps") == (2, None, 4)
    assert pick(cfg("nvfp4/fp16", flush_items_warps=8), "items_warps", "items_maxnreg")[0] == 8
    with pytest.raises(ValueError, match="flush_items_warps=3: a power of two from 1 to 32"):
        cfg("nvfp4/fp16", flush_items_warps=3)
    # L2 hints on the whole-head items' scratch (off by default)
    assert cfg("nvfp4/fp16").scratch_l2 is False and cfg("nvfp4/fp16", flush_scratch_l2=True).scratch_l2 is True
    with pytest.raises(ValueError, match="flush_scratch_l2=2: true, false or none"):
        cfg("nvfp4/fp16", flush_scratch_l2=2)
    # the whole head's corrections first, in groups of rows (off by default)
    assert cfg("nvfp4/fp16").corrections_rows == 0 and cfg("nvfp4/fp16", flush_corrections_rows=64).corrections_rows == 64
    for bad in (8, 48, 0, True):
        with pytest.raises(ValueError, match=f"flush_corrections_rows={bad!r}: rows per group of the whole head's "
                                             "corrections, a power of two from 16"):
            cfg("nvfp4/fp16", flush_corrections_rows=bad)
    for bad in (0, 9, True, 1.0):
        with pytest.raises(ValueError, match="flush_stages=.*: pipeline stages of the flush sub-block loops, 1 .none. to 8"):
            cfg("fp32", flush_stages=bad)
    # GPU: 32-row sub-blocks for a shared 16-bit checkpoint (not a dual spec's, not over the knob)
    monkeypatch.setattr(launch, "_num_sms", lambda device: 132)
    assert pick(cfg("fp16", device="cuda"), "item_rows", "sub_block_rows") == (128, 32) and pick(cfg("bf16+sr", V=64, device="cuda"), "item_rows", "sub_block_rows") == (64, 32)
    assert pick(cfg("fp16", V=16, device="cuda"), "item_rows", "sub_block_rows") == (16, 16) and cfg("fp16", flush_block_v=16, device="cuda").sub_block_rows == 16
    assert cfg("fp32", device="cuda").sub_block_rows == 16 and cfg("fp8/fp16", device="cuda").sub_block_rows == 16
    assert cfg("nvfp4/fp16", device="cuda").stages == 1
    # and for a dual nvfp4 spec's 16-bit recurrence checkpoint with short heads (mamba2: V = 64), not an 8-bit one
    assert cfg("nvfp4/fp16", V=64, device="cuda").sub_block_rows == 32 and cfg("nvfp4/fp8+sr", V=64, device="cuda").sub_block_rows == 16
    assert cfg("nvfp4/fp16", device="cuda").sub_block_rows == 16 and cfg("nvfp4/fp16", V=64).sub_block_rows == 16


def test_flush_dot_precision():
    """fp32 recurrence checkpoints are always flushed with IEEE fp32 dots; the others take the ``flush_dot`` knob
    (default ``ieee``, but on the GPU 3xTF32 in the split flush launch of a dual spec with an nvfp4 read copy); an
    unknown precision is refused with the allowed ones."""
    def prec(spec, split=False, device="cuda", **knobs):
        return launch.flush_dot_precision(_standin(spec, device=device, **knobs), split)

    assert prec("fp32") == "ieee" and prec("nvfp4/fp32", flush_dot="tf32x3") == "ieee"
    assert prec("nvfp4/fp16") == launch.flush_dot_precision(SimpleNamespace(spec=parse_state_spec("fp16"),
                                                                            knobs=LaunchKnobs()))
    assert prec("nvfp4/fp16", flush_dot="tf32x3") == "tf32x3" and prec("fp8+sr", flush_dot="ieee") == "ieee"
    with pytest.raises(ValueError, match="flush_dot='tf32': allowed 'ieee', 'tf32x3'"):
        prec("fp16", flush_dot="tf32")
    assert prec("nvfp4/fp16", True) == "tf32x3" and prec("nvfp4/fp8+sr", True) == "tf32x3"
    assert prec("nvfp4/fp16") == "ieee" and prec("nvfp4/fp16", True, flush_dot="ieee") == "ieee"
    assert prec("nvfp4/fp32", True) == "ieee" and prec("nvfp4+sr", True) == "ieee" and prec("fp8/fp16", True) == "ieee"
    assert prec("nvfp4/fp16", True, device="cpu") == "ieee"   # the interpreter: IEEE unless asked
    assert prec("nvfp4/fp16", True, device="cpu", flush_dot="tf32x3") == "tf32x3"


def test_nvfp4_flush_items_rule(monkeypatch):
    """The few-flush-rows nvfp4 sub-block items (FlushPlan.nvfp4_items): only for a two-pass flush with the S_L
    scratch; by default up to 16 (row, head) pairs of a step per SM (132 SMs, 32 heads: batch <= 66), else off; the
    knob forces them on or off and refuses anything else with the allowed values."""
    monkeypatch.setattr(launch, "_num_sms", lambda device: 132)

    def items(batch=16, V=128, spec="nvfp4/fp16", **knobs):
        return launch.plan_flush(_standin(spec, V=V, **knobs), batch).nvfp4_items

    assert items() and items(batch=66) and not items(batch=67)
    assert not items(V=16) and not items(V=16, flush_nvfp4_items=True)     # one sub-block per head: one pass
    assert not items(spec="fp16") and items(batch=10 ** 4, flush_nvfp4_items=True)
    assert not items(flush_nvfp4_items=False) and items(spec="nvfp4+sr")
    with pytest.raises(ValueError, match="flush_nvfp4_items=3: true .*false .*none"):
        items(flush_nvfp4_items=3)


def test_nvfp4_item_blocks_knob(monkeypatch):
    """Sub-blocks per pass-1 nvfp4 item: 0 in the plan by default (decided on the device per step,
    tests/kernels/test_nvfp4_items.py), the knob's power of two otherwise; anything else refused."""
    monkeypatch.setattr(launch, "_num_sms", lambda device: 132)

    def blocks(**knobs):
        return launch.plan_flush(_standin("nvfp4/fp16", V=128, **knobs), 16).nvfp4_item_blocks

    assert blocks() == 0 and blocks(flush_nvfp4_item_blocks=2) == 2
    for bad in (3, 0, True):
        with pytest.raises(ValueError, match=f"flush_nvfp4_item_blocks={bad!r}: a power of two"):
            blocks(flush_nvfp4_item_blocks=bad)


def test_flush_stream_knob():
    """A split step's flush launches go to a side stream by default (``flush_stream`` 1; 0: the caller's stream);
    other values are refused with the allowed ones (2, a high-priority side stream, was removed: docs/TUNING.md);
    off the GPU there is no side stream. ``flush_first`` (the flush launches enqueued first) was removed too."""
    assert LaunchKnobs().flush_stream == 1 and LaunchKnobs(flush_stream=0).flush_stream == 0
    for bad in (2, 3, -1, True, "1", None):
        with pytest.raises(ValueError, match=r"flush_stream=.*: allowed 0 \(off: the caller's stream\), 1 \(side"):
            LaunchKnobs(flush_stream=bad)
    assert decode.flush_side_stream(SimpleNamespace(knobs=LaunchKnobs()), torch.device("cpu")) is None
    with pytest.raises(ValueError, match="bad knob 'flush_first=true'"):
        parse_knobs("flush_first=true,flush_stream=0")
    assert parse_knobs("flush_stream=0,split_flush=true") == dict(flush_stream=0, split_flush=True)
    assert parse_knobs("flush_items_dot=IEEE,flush_dot=tf32x3") == dict(flush_items_dot="ieee", flush_dot="tf32x3")
    with pytest.raises(ValueError, match="knob block_v given twice"):   # (the last one silently won)
        parse_knobs("block_v=16,num_warps=2,block_v=32")
    assert launch.plan_flush(_standin("fp32", device="cpu"), 4).side_stream is False
    with pytest.raises(ValueError, match="knobs must be a LaunchKnobs"):
        from replayssm_quant.kernels import SSMStateCache
        SSMStateCache("gdn", "fp32", 1, 1, 16, 16, backend="torch", knobs=dict(block_v=16))


def test_verify_launch_rule():
    """The speculative verify's launch (kernels.verify): the whole head per program on a CPU and on the GPU, except
    32-row blocks for kda on the GPU; one program per (row, head); 4 warps; tf32x3 dots on the GPU, IEEE in the
    interpreter (the H200 sweep, reports/bench/spec); the knobs override and are checked."""
    from replayssm_quant.kernels import verify

    c = _standin("fp32", V=128, HV=32)
    assert verify.verify_block_v(c, 256) == 128 and verify.verify_warps(c) == 4 and verify.verify_split(c, 1) == 1
    assert verify.verify_dot(c) == "tf32x3" and verify.verify_dot(_standin("fp32", device="cpu")) == "ieee"
    assert verify.verify_block_v(_standin("fp32", V=128, family="kda"), 256) == 32
    assert verify.verify_block_v(_standin("fp32", V=128, family="kda", device="cpu"), 256) == 128
    assert verify.verify_block_v(_standin("fp32", V=64, family="mamba2"), 1) == 64
    k = _standin("fp32", V=128, block_v=16, verify_warps=8, verify_split=2, verify_dot="ieee")
    assert verify.verify_block_v(k, 256) == 16 and verify.verify_warps(k) == 8 and verify.verify_dot(k) == "ieee"
    assert verify.verify_split(k, 8) == 2 and verify.verify_split(k, 1) == 1
    with pytest.raises(ValueError, match="verify_split=3: a power of two"):
        LaunchKnobs(verify_split=3)
    with pytest.raises(ValueError, match="verify_warps=3: a power of two from 1 to 32"):
        LaunchKnobs(verify_warps=3)
    with pytest.raises(ValueError, match="verify_dot='tf32': allowed 'ieee', 'tf32x3'"):
        LaunchKnobs(verify_dot="tf32")


def test_window_1_nvfp4_refuses_sub_blocks_wider_than_its_programs():
    """A window-1 nvfp4 state whose head is split over V-block programs cannot encode in sub-blocks wider than a
    program's rows (it returned garbage; found by a differential fuzz against the torch reference): refused with the
    allowed choices. The default plan (one program per head) and narrower sub-blocks still plan."""
    for spec in ("nvfp4+sr", "nvfp4"):
        with pytest.raises(ValueError, match=r"flush_block_v=16 exceeds block_v=8 for a window-1 nvfp4 state of "
                                             r"head_v=40: take flush_block_v <= block_v, or block_v >= 64"):
            launch.plan_step(_standin(spec, window=1, V=40, device="cpu", block_v=8, flush_block_v=16), 2)
        assert launch.plan_step(_standin(spec, window=1, V=40, device="cpu"), 2).block_v == 64
        forced = _standin(spec, window=1, V=40, device="cpu", block_v=8, flush_block_v=4)
        assert launch.plan_step(forced, 2).block_v == 8
