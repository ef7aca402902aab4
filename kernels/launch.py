"""Launch planning of a decode step: which kernels run, with which tiles, warps and register caps.

:func:`plan_step` turns a cache's shapes, spec and :class:`LaunchKnobs` into a :class:`StepPlan`, which the
launcher (:func:`.decode.triton_step`) reads and nothing else decides. Every rule below is a heuristic measured
on the H200; docs/TUNING.md gives each one with its reason and the run that measured it. A knob left at ``None``
means "the heuristic"; a value overrides it (the benchmark and scripts/gpu sweep them).

Two ways to run a replay step:

* **fused**: one grid ``(cdiv(V, BV), HV, B)`` of :func:`.fused._decode_step_kernel` programs, each handling its
  row either as a non-flush or as a flush step (small grids; conventional decoding always);
* **split**: the non-flush rows in :func:`.nonflush._nonflush_kernel` (one program per (row, head)), the flush
  rows listed on the device and flushed by the persistent :func:`.flush._flush_kernel` (:class:`FlushPlan`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, fields

import torch

from .naive import DELTA_RULE, PER_KEY_DECAY
from .reference import block_k, nonflush_kc, replay_flush_rows

FLUSH_PROGRAMS_PER_SM = 4          # persistent flush launch: 4 programs of 4 warps x 128 registers fill an SM
FLUSH_WARPS = 4                    # warps of a flush program (16-row sub-blocks of 128 keys: 16 elements per thread)
ITEMS_WARPS_ONE_DECAY = 2          # nvfp4 pass-1 items of a one-decay-per-head delta rule (gdn) with 3xTF32 dots
REPLAY_MAXNREG = 128               # register cap of a large replay launch (4 programs of 4 warps per SM)
CONVENTIONAL_SR8_MAXNREG = 80      # conventional 8-warp launch rounding stochastically into 8 bits: 3 per SM
CONVENTIONAL_NVFP4_MAXNREG = 128   # conventional nvfp4 head programs on large grids: 2 of 8 warps per SM
NONFLUSH_DELTA_MAXNREG = 128       # register cap of the delta-rule families' non-flush launch
NONFLUSH_STAGES = 3                # software-pipeline stages of the non-flush key-chunk loop, when staged
NONFLUSH_STAGED_PER_SM = 32        # fp32 / 16-bit read copies: staged from this many non-flush programs per SM
NVFP4_ITEMS_MAX_PAIRS_PER_SM = 16  # nvfp4 flush sub-block items: up to this many (row, head) pairs per SM
DOT_PRECISIONS = ("ieee", "tf32x3")
_WARPS = (1, 2, 4, 8, 16, 32)


def _check(name: str, value, ok, allowed: str):
    """``value`` if it is an int (not a bool) for which ``ok(value)`` holds; else ValueError naming the knob."""
    if isinstance(value, bool) or not isinstance(value, int) or not ok(value):
        raise ValueError(f"{name}={value!r}: {allowed}")
    return value


def _check_flag(name: str, value, allowed: str = "true, false or none (the default)"):
    if value is not None and not isinstance(value, bool) and value not in (0, 1):
        raise ValueError(f"{name}={value!r}: {allowed}")


@dataclass(frozen=True)
class LaunchKnobs:
    """Overrides of the launch heuristics of :func:`plan_step` (``None``: the heuristic; docs/TUNING.md).

    Attributes:
        block_v: rows of V per program of the fused / conventional grid (a power of two; replay below 16: programs
            of one warp unless ``num_warps``, flushing in groups, :func:`.fused._step_program`).
        flush_block_v: rows per flush sub-block (a power of two; replay at least 16, for ``tl.dot``).
        num_warps: warps of the fused / conventional launch (1..32, a power of two).
        maxnreg: register cap of the fused / conventional launch, or of the flush launch when split (0: none).
        split_flush: run a replay step as separate non-flush and flush launches (True) or fused (False).
        step_advance: a fused step advances the rows' counters in its own launch (True: the last program of each
            row, :func:`.fused._advance_if_last`) or in a second one (False: ``_advance_kernel``).
        arrive_deferred: in a fused step that advances its counters, each program's arrival reply stays in one
            thread until the program's end (True) or reaches every thread at the atomic, mid-program (False); the
            same bits. None: deferred for conventional decoding (window 1), at the atomic for replay (docs/TUNING.md).
        nonflush_prefetch: load each next read-copy key chunk before reducing the current one (unstaged loop).
        nonflush_warps: warps of the non-flush launch (1..32, a power of two).
        nonflush_maxnreg: register cap of the non-flush launch (24..255; 0: none).
        nonflush_stages: software-pipeline stages of the non-flush key-chunk loop (0: unrolled, up to 8).
        nonflush_xscratch: park the key row's ``gamma q``, ``gamma k`` in a scratch row for the chunks.
        nonflush_e2m1_ptx: an nvfp4 read copy's E2M1 codes decoded through their E4M3 image and the hardware cvt
            (inline PTX, True) or by integer operations (False); the same bits. None: PTX for the delta rule,
            integers for mamba2, whose staged chunk loop ptxas unrolls whole with the PTX decode (docs/TUNING.md).
        flush_stages: ``num_stages`` of the flush sub-block loops (1: no pipeline, up to 8).
        flush_warps: warps of a flush program (a power of two from 1 to 32; None: :data:`FLUSH_WARPS`, more for
            sub-blocks of more than 4096 elements). Fewer warps per program split a sub-block's 16-row dots without
            duplicating them across warps (docs/TUNING.md, "Flush launch").
        fused_nvfp4_spread: the fused grid's two-pass nvfp4 flush (small grids: batch 1) spread over the head's V-block
            programs (None / True, the default: each builds S_L of its rows into the head's scratch and its amax,
            the last of them to arrive encodes the whole head) or in the head's first program alone (False);
            the same bits (docs/TUNING.md).
        flush_items_warps: warps of a program of the few-flush-rows nvfp4 pass-1 items' launch
            (:func:`.nvfp4_items._nvfp4_part_kernel`; a power of two from 1 to 32; None: 2 for a delta rule with
            one decay per head (gdn) whose items take 3xTF32 dots, else the flush's warps: docs/TUNING.md). Below 4
            warps that launch runs without the register cap (4 programs of 2 warps at up to 255 registers fill an
            SM as 4 of 4 warps at 128 do); the grid and pass 2 (in the flush launch) keep the flush's.
        flush_programs_per_sm: programs per SM of the persistent flush grid (1..32; None: :data:`FLUSH_PROGRAMS_PER_SM`,
            times ``4 // flush_warps`` below 4 warps: the same warps per SM).
        flush_corrections_rows: a dual nvfp4 flush of a separate delta-rule spec first computes the whole head's
            recomputed corrections in groups of this many rows (a power of two >= 16), then reloads them per sub-block;
            None: per 16-row sub-block, where at 4 warps the 16 x 16 dots repeat over warps (docs/TUNING.md).
        flush_scratch_l2: the whole-head two-pass nvfp4 flush stores its S_L scratch with the L2 hint evict_last
            and reloads it with evict_first (True), or without hints (None / False); the bits do not change.
        flush_dot: input precision of the flush's fp32 dots, ``"ieee"`` or ``"tf32x3"``.
        flush_items_dot: input precision of the fp32 dots of the few-flush-rows nvfp4 pass-1 items
            (:mod:`.nvfp4_items`), ``"ieee"`` or ``"tf32x3"``; None: ``"ieee"`` for a row-scaled 8-bit recurrence
            checkpoint with stochastic rounding, else the flush's (``flush_dot``). Apart from the
            whole-head flush's because the items run only when few rows flush (staggered rows at small batch),
            where their spills under 3xTF32 cost most (docs/TUNING.md, "Flush launch").
        flush_stream: a split step's flush launches on a side stream (1, the default) or the caller's (0).
        flush_nvfp4_items: few flush rows of an nvfp4 checkpoint flushed in sub-block items (True / False).
        flush_nvfp4_item_blocks: sub-blocks per pass-1 nvfp4 item (a power of two; None: decided on the device per
            step, the fewest that keep the pass-1 items within one wave of the flush grid).
        verify_warps: warps of the speculative verify launch (1..32, a power of two; its V-block is ``block_v``).
        verify_split: programs per (row, head) of the verify launch over its V-blocks (a power of two; 1: one
            program computes the key side once and loops over every block).
        verify_dot: input precision of the verify's fp32 dots, ``"ieee"`` (CUDA-core FMAs; the default in the
            interpreter) or ``"tf32x3"`` (tensor cores, three TF32 products; the default on the GPU).
    """

    block_v: int | None = None
    flush_block_v: int | None = None
    num_warps: int | None = None
    maxnreg: int | None = None
    split_flush: bool | None = None
    step_advance: bool | None = None
    arrive_deferred: bool | None = None
    nonflush_prefetch: bool | None = None
    nonflush_warps: int | None = None
    nonflush_maxnreg: int | None = None
    nonflush_stages: int | None = None
    nonflush_xscratch: bool | None = None
    nonflush_e2m1_ptx: bool | None = None
    flush_stages: int | None = None
    flush_warps: int | None = None
    flush_items_warps: int | None = None
    fused_nvfp4_spread: bool | None = None
    flush_programs_per_sm: int | None = None
    flush_corrections_rows: int | None = None
    flush_scratch_l2: bool | None = None
    flush_dot: str | None = None
    flush_items_dot: str | None = None
    flush_stream: int = 1
    flush_nvfp4_items: bool | None = None
    flush_nvfp4_item_blocks: int | None = None
    verify_warps: int | None = None
    verify_split: int | None = None
    verify_dot: str | None = None

    def __post_init__(self):
        pow2 = lambda x: x >= 1 and x & (x - 1) == 0   # noqa: E731
        for name in ("block_v", "flush_block_v", "verify_split", "flush_nvfp4_item_blocks"):
            if getattr(self, name) is not None:
                _check(name, getattr(self, name), pow2, "a power of two")
        for name in ("num_warps", "nonflush_warps", "verify_warps", "flush_warps", "flush_items_warps"):
            if getattr(self, name) is not None:
                _check(name, getattr(self, name), lambda x: x in _WARPS, "a power of two from 1 to 32")
        if self.maxnreg is not None:
            _check("maxnreg", self.maxnreg, lambda x: x == 0 or 24 <= x <= 255, "registers per thread, 24 to 255, "
                   "or 0 for no cap")
        if self.nonflush_maxnreg is not None:
            _check("nonflush_maxnreg", self.nonflush_maxnreg, lambda x: x == 0 or 24 <= x <= 255,
                   "registers per thread, 24 to 255, or 0 for no cap")
        if self.nonflush_stages is not None:
            _check("nonflush_stages", self.nonflush_stages, lambda x: 0 <= x <= 8,
                   "pipeline stages of the key-chunk loop, 0 (none) to 8")
        if self.flush_corrections_rows is not None:
            _check("flush_corrections_rows", self.flush_corrections_rows, lambda x: x >= 16 and pow2(x),
                   "rows per group of the whole head's corrections, a power of two from 16")
        if self.flush_programs_per_sm is not None:
            _check("flush_programs_per_sm", self.flush_programs_per_sm, lambda x: 1 <= x <= 32,
                   "programs per SM of the persistent flush grid, 1 to 32")
        if self.flush_stages is not None:
            _check("flush_stages", self.flush_stages, lambda x: 1 <= x <= 8,
                   "pipeline stages of the flush sub-block loops, 1 (none) to 8")
        for name in ("flush_dot", "flush_items_dot", "verify_dot"):
            if getattr(self, name) is not None and getattr(self, name) not in DOT_PRECISIONS:
                raise ValueError(f"{name}={getattr(self, name)!r}: allowed {', '.join(map(repr, DOT_PRECISIONS))}")
        if isinstance(self.flush_stream, bool) or self.flush_stream not in (0, 1):
            raise ValueError(f"flush_stream={self.flush_stream!r}: allowed 0 (off: the caller's stream), "
                             "1 (side stream)")
        for name in ("split_flush", "step_advance", "arrive_deferred", "nonflush_prefetch", "nonflush_xscratch",
                     "nonflush_e2m1_ptx", "flush_scratch_l2", "fused_nvfp4_spread"):
            _check_flag(name, getattr(self, name))
        _check_flag("flush_nvfp4_items", self.flush_nvfp4_items,
                    "true (sub-block items when few rows flush), false (whole-head items) or none (the default)")


    def overrides(self) -> str:
        """The fields set away from their defaults, as ``name=value`` pairs (``parse_knobs`` syntax)."""
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                        if getattr(self, f.name) != f.default) or "defaults"


DEFAULT_KNOBS = LaunchKnobs()


@dataclass(frozen=True)
class NonflushPlan:
    """The split step's non-flush launch (:func:`.nonflush._nonflush_kernel`, grid ``(1, HV, B)``)."""

    rows: int             # BVA: all V rows of a head (next power of two)
    key_chunk: int        # KC: key columns per chunk (:func:`.reference.nonflush_kc`, fixed by the reduction order)
    prefetch: bool        # unstaged loop: the next chunk loaded before the current one is reduced
    num_warps: int
    maxnreg: int | None   # register cap (None: none)
    stages: int           # 0: unrolled chunk loop; > 0: software-pipelined over that many stages
    input_scratch: bool   # the chunks' inputs from a scratch row (``XSCR``)
    e2m1_ptx: bool        # an nvfp4 read's E2M1 decode through the inline-PTX E4M3 image (else integer operations)


@dataclass(frozen=True)
class FlushPlan:
    """The split step's flush launches (:func:`.flush._flush_kernel`, a persistent grid)."""

    item_rows: int        # BVI: rows of V per work item (the whole head)
    sub_block_rows: int   # BVF: rows per flush sub-block
    num_warps: int
    maxnreg: int | None
    scratch: bool         # nvfp4 two-pass flush: S_L kept in fp32 scratch between the passes
    programs_per_sm: int
    stages: int | None    # num_stages of the sub-block loops (None: Triton's default)
    dot: str              # input precision of the fp32 dots
    nvfp4_items: bool     # few flush rows of an nvfp4 checkpoint: sub-block items (:mod:`.nvfp4_items`)
    items_dot: str        # input precision of the pass-1 items' fp32 dots (:func:`_items_dot`)
    items_warps: int      # warps of the pass-1 items' launch (:func:`.nvfp4_items._nvfp4_part_kernel`)
    items_maxnreg: int | None   # its register cap
    nvfp4_item_blocks: int   # sub-blocks per pass-1 item (0: the fewest that keep pass 1 within one wave, per step)
    corrections_rows: int    # two-pass nvfp4, separate delta rule: the head's corrections first, in groups (0: off)
    scratch_l2: bool         # L2 eviction hints on the whole-head items' S_L scratch
    side_stream: bool     # the flush launches on a side stream


@dataclass(frozen=True)
class StepPlan:
    """How one decode step of ``batch`` rows is launched (:func:`plan_step`)."""

    block_v: int          # BV: rows of V per program of the fused / conventional grid
    flush_block_v: int    # BVF: rows per flush sub-block of that grid
    num_warps: int
    nvfp4: bool           # a checkpoint is nvfp4: its flush needs the whole head's amax
    maxnreg: int | None   # register cap of the fused launch, or of the flush launch when split
    split: bool
    dot: str              # input precision of the fused grid's flush dots
    stages: int | None    # num_stages of the fused grid (None: Triton's default)
    step_advance: bool = False   # fused: the step's own programs advance the counters (no second launch)
    arrive_lanes: int = 0        # with step_advance: 32 x num_warps to keep the arrival reply in one thread, else 0
    nvfp4_spread: bool = False   # two-pass nvfp4 flush over the head's V-block programs, the last encodes
    nonflush: NonflushPlan | None = None   # when split
    flush: FlushPlan | None = None         # when split


def _next_pow2(n: int) -> int:
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _num_sms(device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def _knobs(cache) -> LaunchKnobs:
    return getattr(cache, "knobs", None) or DEFAULT_KNOBS


def _on_gpu(cache) -> bool:
    return getattr(getattr(cache, "device", None), "type", None) == "cuda"


def choose_block_v(cache, batch: int) -> int:
    """Rows of V per fused / conventional program: the whole head on the CPU; on the GPU from a ``[BV, BK]`` tile
    of 4096 elements (replay, and conventional 16-bit checkpoints with per-key decays or V <= 64) or 8192
    (conventional), halved (down to 8; replay 16, per-key decays 32) until the grid has >= 4 programs per SM. A
    ``block_v`` knob below 16 gives replay programs that flush in groups (:func:`_fused_tiles`)."""
    knobs = _knobs(cache)
    full = _next_pow2(cache.head_v)
    if knobs.block_v:
        return knobs.block_v
    if not _on_gpu(cache):
        return full
    per_key = PER_KEY_DECAY[cache.family]
    small_tile = (cache.window == 1 and cache.spec.recur.bits_per_element == 16
                  and (per_key or cache.head_v <= 64))
    tile = 4096 if cache.window > 1 or small_tile else 8192
    bv = min(full, max(8, tile // block_k(cache.head_k)))
    low = 8 if cache.window == 1 else (32 if per_key else 16)
    while bv > low and batch * cache.num_heads * _cdiv(cache.head_v, bv) < 4 * _num_sms(cache.device):
        bv //= 2
    return bv


def _fused_tiles(cache, batch: int) -> tuple[int, int, int, bool]:
    """``(BV, BVF, num_warps, nvfp4)`` of the fused / conventional grid."""
    knobs = _knobs(cache)
    V, BK, gpu = cache.head_v, block_k(cache.head_k), _on_gpu(cache)
    BV = choose_block_v(cache, batch)
    nvfp4 = "nvfp4" in (cache.spec.read.name, cache.spec.recur.name)
    BVF = knobs.flush_block_v or 32
    if nvfp4 and cache.window == 1 and not knobs.flush_block_v:
        BV = BVF = _next_pow2(V)   # conventional nvfp4: one program and one pass per head
    elif cache.window == 1 and gpu and cache.spec.recur.bits_per_element <= 16 and not knobs.flush_block_v:
        BVF = BV   # conventional 16- / 8-bit checkpoints: the whole V-block in one sub-block
    BVF = min(BVF, _next_pow2(V)) if nvfp4 else min(BV, BVF)
    if cache.window > 1:   # the chunked flush: fp32 tl.dot (dims >= 16), row sub-blocks as the reference; programs
        BVF = replay_flush_rows(cache)   # of fewer rows (a block_v knob) flush in groups (fused._step_program)
        if gpu and not knobs.flush_block_v and BV * BK >= 8192:
            BVF = 32
        BVF = min(BVF, _next_pow2(V)) if nvfp4 else min(BVF, max(BV, 16))
    if not nvfp4 and BV % BVF and BVF % BV:
        raise ValueError(f"flush_block_v={BVF} and block_v={BV}: one must divide the other")
    if nvfp4 and cache.window == 1 and BV < BVF and BV < _next_pow2(V):
        # (a head split over V-block programs encodes in sub-blocks of at most its program's rows)
        raise ValueError(f"flush_block_v={BVF} exceeds block_v={BV} for a window-1 nvfp4 state of head_v={V}: take "
                         f"flush_block_v <= block_v, or block_v >= {_next_pow2(V)} (the whole head)")
    num_warps = knobs.num_warps or max(4, min(16, max(BV, BVF) * BK // 1024))   # <= 32 elements per thread
    if cache.window > 1 and BV < 16 and not knobs.num_warps:
        num_warps = 1   # (a block_v knob below 16) a warp per program, as fla's batch-1 kernels (docs/TUNING.md)
    return BV, BVF, num_warps, nvfp4


def _fused_maxnreg_and_split(cache, batch: int, BV: int, num_warps: int, nvfp4: bool) -> tuple[int | None, bool]:
    knobs = _knobs(cache)
    programs = batch * cache.num_heads * _cdiv(cache.head_v, BV)
    sms = _num_sms(cache.device)
    large_grid = _on_gpu(cache) and programs > 2 * sms
    replay = cache.window > 1
    maxnreg = knobs.maxnreg
    if maxnreg is None and replay and large_grid and num_warps >= 4:
        maxnreg = REPLAY_MAXNREG
    if (maxnreg is None and not replay and _on_gpu(cache) and num_warps == 8 and cache.spec.sr
            and cache.spec.recur.bits_per_element == 8):
        maxnreg = CONVENTIONAL_SR8_MAXNREG
    if maxnreg is None and nvfp4 and not replay and large_grid:
        maxnreg = CONVENTIONAL_NVFP4_MAXNREG
    split = knobs.split_flush
    if split is None:   # a second launch costs ~3 us: only grids of > 8 programs per SM
        split = replay and large_grid and programs > 8 * sms
    return (maxnreg or None), replay and bool(split)


def flush_dot_precision(cache, split: bool = False) -> str:
    """Input precision of the replay flush's fp32 ``tl.dot`` products: ``"ieee"`` always for an fp32 recurrence
    checkpoint; else the ``flush_dot`` knob, by default ``"tf32x3"`` (about fp32 accuracy from three TF32 tensor-core
    products, :func:`.flush_math._dot_tf32x3`) on the GPU in the split flush launch of a separate spec with an nvfp4
    read copy, ``"ieee"`` elsewhere (the interpreter computes each TF32 product in fp32: not the same sums)."""
    knob = _knobs(cache).flush_dot
    if cache.spec.recur.name == "fp32":
        return "ieee"
    if knob is None and split and _on_gpu(cache) and not cache.spec.shared and cache.spec.read.name == "nvfp4":
        return "tf32x3"
    return knob or "ieee"


def _items_dot(cache, dot: str) -> str:
    """Input precision of the nvfp4 pass-1 items' fp32 dots: the ``flush_items_dot`` knob; else IEEE where the
    recurrence checkpoint is a row-scaled 8-bit format with stochastic rounding (``nvfp4/fp8+sr``, ``nvfp4/int8+sr``:
    their items spill under 3xTF32, the aligned step's whole-head flush keeps ``dot``; docs/TUNING.md, "Flush
    launch"); else the flush's ``dot`` (IEEE for an fp32 recurrence checkpoint, whose items ignore the knob)."""
    if cache.spec.recur.name == "fp32":
        return dot
    if _knobs(cache).flush_items_dot is not None:
        return _knobs(cache).flush_items_dot
    return "ieee" if cache.spec.recur.row_scaled and cache.spec.sr else dot


def plan_nonflush(cache, batch: int) -> NonflushPlan:
    """The split step's non-flush launch for ``batch`` rows (rules: docs/TUNING.md, "Non-flush launch")."""
    knobs = _knobs(cache)
    delta, per_key = DELTA_RULE[cache.family], PER_KEY_DECAY[cache.family]
    BVA = _next_pow2(cache.head_v)
    KC = nonflush_kc(block_k(cache.head_k))
    bits = cache.spec.read.bits_per_element
    prefetch = bits in (32, 8) if knobs.nonflush_prefetch is None else bool(knobs.nonflush_prefetch)
    stages = knobs.nonflush_stages
    if stages is None:
        large = batch * cache.num_heads >= NONFLUSH_STAGED_PER_SM * _num_sms(cache.device)
        staged = large if per_key else (bits < 8 or (bits != 8 and large))
        stages = NONFLUSH_STAGES if staged else 0
    if stages:   # <= 64 elements of a chunk per thread
        warps = max(2, min(16, BVA * KC // 2048))
    else:
        warps = 2 if bits in (16, 8) or (bits < 8 and BVA * KC >= 4096) else max(4, min(16, BVA * KC // 1024))
    warps = knobs.nonflush_warps or warps
    maxnreg = knobs.nonflush_maxnreg
    if maxnreg is None:
        capped = delta and (not per_key or warps >= 4 or (stages > 0 and bits != 32))
        maxnreg = NONFLUSH_DELTA_MAXNREG if capped else 0
    xscratch = cache.spec.read.name == "nvfp4" if knobs.nonflush_xscratch is None else bool(knobs.nonflush_xscratch)
    e2m1_ptx = cache.spec.read.name == "nvfp4" and (delta if knobs.nonflush_e2m1_ptx is None
                                                    else bool(knobs.nonflush_e2m1_ptx))
    return NonflushPlan(rows=BVA, key_chunk=KC, prefetch=prefetch and not stages, num_warps=warps,
                        maxnreg=maxnreg or None, stages=stages, input_scratch=xscratch, e2m1_ptx=e2m1_ptx)


def plan_flush(cache, batch: int, step: StepPlan | None = None) -> FlushPlan:
    """The split step's flush launch for ``batch`` rows (``step``: the fused grid's tiles it starts from; rules:
    docs/TUNING.md, "Flush launch")."""
    knobs = _knobs(cache)
    step = step or _fused_plan(cache, batch)
    BVF, nvfp4 = step.flush_block_v, step.nvfp4
    V = cache.head_v
    short_dual = not cache.spec.shared and cache.spec.read.name == "nvfp4" and V <= 64
    if (_on_gpu(cache) and not knobs.flush_block_v and cache.spec.recur.bits_per_element == 16
            and (cache.spec.shared or short_dual)):
        BVF = max(BVF, min(32, _next_pow2(V)))
    BVI = max(BVF, _next_pow2(V))
    scratch = _two_pass_nvfp4(nvfp4, BVF, V)
    dot = flush_dot_precision(cache, split=True)
    stages = knobs.flush_stages
    if stages is None and (not nvfp4 or dot == "tf32x3"):
        stages = 1
    items = knobs.flush_nvfp4_items
    if items is None:
        items = batch * cache.num_heads <= NVFP4_ITEMS_MAX_PAIRS_PER_SM * _num_sms(cache.device)
    warps = knobs.flush_warps or max(FLUSH_WARPS, min(16, BVF * block_k(cache.head_k) // 1024))
    programs = knobs.flush_programs_per_sm or FLUSH_PROGRAMS_PER_SM * max(1, FLUSH_WARPS // warps)
    items_dot = _items_dot(cache, dot)
    one_decay = DELTA_RULE[cache.family] and not PER_KEY_DECAY[cache.family]
    items_warps = knobs.flush_items_warps or (ITEMS_WARPS_ONE_DECAY if one_decay and items_dot == "tf32x3" else warps)
    return FlushPlan(item_rows=BVI, sub_block_rows=BVF, num_warps=warps,
                     maxnreg=step.maxnreg, scratch=scratch, programs_per_sm=programs, stages=stages, dot=dot,
                     nvfp4_items=bool(items) and scratch, items_dot=items_dot, items_warps=items_warps,
                     items_maxnreg=step.maxnreg if items_warps >= FLUSH_WARPS else None,
                     nvfp4_item_blocks=knobs.flush_nvfp4_item_blocks or 0,
                     corrections_rows=knobs.flush_corrections_rows or 0, scratch_l2=bool(knobs.flush_scratch_l2),
                     side_stream=bool(knobs.flush_stream) and _on_gpu(cache))


def _two_pass_nvfp4(nvfp4: bool, BVF: int, V: int) -> bool:
    """Whether an nvfp4 flush of ``BVF``-row sub-blocks takes two passes (the head's amax, then the encode) with an
    S_L scratch between them: the head does not fit one sub-block."""
    return nvfp4 and BVF < _next_pow2(V)


def _step_advance(cache, batch: int, BV: int, split: bool) -> bool:
    """Whether a fused step advances its counters itself: on grids of <= 8 programs per SM (every grid off the
    GPU), where the second launch is a visible share of the step; on larger grids each program's wait for its
    arrival atomic costs more than the launch (docs/TUNING.md)."""
    knob = _knobs(cache).step_advance
    if split:
        return False
    if knob is not None:
        return knob
    return not (_on_gpu(cache) and batch * cache.num_heads * _cdiv(cache.head_v, BV) > 8 * _num_sms(cache.device))


def _arrive_lanes(cache, num_warps: int, step_advance: bool) -> int:
    """``StepPlan.arrive_lanes``: where a fused step advances its counters, its programs' threads (the arrival's
    reply kept in one thread to the program's end, :func:`.fused._arrive`) for conventional decoding (window 1),
    whose batch-1 step it makes faster, and 0 (the reply at the atomic) for replay, whose programs wait for their
    checkpoint and ring loads there anyway (docs/TUNING.md); the knob ``arrive_deferred`` overrides."""
    knob = _knobs(cache).arrive_deferred
    deferred = knob if knob is not None else cache.window == 1
    return 32 * num_warps if step_advance and deferred else 0


def _fused_plan(cache, batch: int) -> StepPlan:
    BV, BVF, num_warps, nvfp4 = _fused_tiles(cache, batch)
    maxnreg, split = _fused_maxnreg_and_split(cache, batch, BV, num_warps, nvfp4)
    advance = _step_advance(cache, batch, BV, split)
    return StepPlan(block_v=BV, flush_block_v=BVF, num_warps=num_warps, nvfp4=nvfp4, maxnreg=maxnreg, split=split,
                    dot=flush_dot_precision(cache), stages=_knobs(cache).flush_stages, step_advance=advance,
                    arrive_lanes=_arrive_lanes(cache, num_warps, advance),
                    nvfp4_spread=(_two_pass_nvfp4(nvfp4, BVF, cache.head_v)
                                  and _knobs(cache).fused_nvfp4_spread is not False))


def plan_step(cache, batch: int) -> StepPlan:
    """The launch plan of one decode step of ``batch`` rows on ``cache`` (an :class:`.SSMStateCache`, or any
    object with its ``family``, ``spec``, ``window``, ``num_heads``, ``head_k``, ``head_v``, ``device`` and
    ``knobs``)."""
    plan = _fused_plan(cache, batch)
    if not plan.split:
        return plan
    return dataclasses.replace(plan, nonflush=plan_nonflush(cache, batch), flush=plan_flush(cache, batch, plan))


#: Formats whose GPU code converts E4M3 with instructions of compute capability 8.9 and later: fp8 / e4m3 through
#: Triton's float8e4nv casts, nvfp4 decodes through the e4m3x2 -> f16x2 cvt (:mod:`.rounding`, ``HW_CASTS``).
FP8_CONVERSION_FORMATS = ("fp8", "e4m3", "nvfp4")


def check_device_formats(device, formats, what: str) -> None:
    """Raise ValueError if the Triton kernels cannot run on ``device``: a device neither CUDA nor CPU, a CPU device
    without the interpreter (``TRITON_INTERPRET=1``, read when triton is imported), or a CUDA GPU of compute
    capability below 8.9 (before Ada / Hopper) where the kernels of any of ``formats`` (format names) would need
    its E4M3 conversions; the message says what is wrong and what runs instead. The interpreter takes every
    format. ``what`` names the caller in the message."""
    device = torch.device(device)
    if device.type == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(f"{what}: the Triton kernels on a CPU device need TRITON_INTERPRET=1 set before triton "
                             "is imported (or use backend='torch': the same bits)")
        return
    if device.type != "cuda":
        raise ValueError(f"{what}: the Triton kernels run on CUDA GPUs or, through the interpreter, on the CPU; "
                         f"got a tensor on {device}")
    need = [f for f in dict.fromkeys(formats) if f in FP8_CONVERSION_FORMATS]
    if not need:
        return
    cc = tuple(torch.cuda.get_device_capability(device))
    if cc < (8, 9):
        raise ValueError(f"{what}: the Triton kernels of {', '.join(need)} need E4M3 conversion instructions of "
                         f"compute capability 8.9 or later (Ada, Hopper, Blackwell); {device} is sm_{cc[0]}{cc[1]}. "
                         "Use backend='torch' (the same bits), or formats fp32, bf16, fp16, int8 or e5m2.")


def launch_options(device, num_warps: int, maxnreg: int | None = None, stages: int | None = None) -> dict:
    """The launch keywords of a kernel: ``num_warps``, a register cap (CUDA only: the interpreter takes no
    ``maxnreg``) and the software-pipeline stages of its loops (None: Triton's default)."""
    opts = dict(num_warps=num_warps)
    if maxnreg and device.type == "cuda":
        opts["maxnreg"] = maxnreg
    if stages is not None:
        opts["num_stages"] = stages
    return opts
