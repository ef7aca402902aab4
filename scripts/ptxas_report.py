"""Registers, spills and shared memory of a decode kernel on sm_90, compiled OFFLINE (no GPU): the speculative verify
kernel, or (``--nvfp4-items``) pass 1 of the nvfp4 flush items of few flush rows.

Triton compiles ``kernels.verify._verify_kernel`` for an H100/H200 target exactly as :func:`~.verify.triton_verify`
would launch it (its keyword arguments captured from a real call on a CPU cache, the launch itself replaced by a
recorder in this script), then the bundled ``ptxas -v`` reads the PTX. The interpreter cannot show any of this (nor
compile errors); a row here is what a GPU launch of that config would get. Prints one table:

    python scripts/ptxas_report.py [--families mamba2,gdn,kda] [--specs fp32,nvfp4/fp16] [--block-v 16,32,64]
                                   [--split 1,2] [--warps 4,8,16] [--dots ieee,tf32x3] [--csv OUT.csv]
    python scripts/ptxas_report.py --nvfp4-items [--families gdn,kda] [--specs nvfp4/fp16] [--item-blocks 0,1,2,4]
    python scripts/ptxas_report.py --flush [--families gdn,kda,mamba2] [--specs fp8+sr,int8+sr] [--batch 256]
                                   [--dots plan,tf32x3] [--knobs "default;flush_block_v=32"] [--tree DIR]
    python scripts/ptxas_report.py --nonflush [--families gdn] [--specs fp8+sr] [--knobs "default;nonflush_stages=3"]

``--flush`` compiles the split step's flush launch (``kernels.flush._flush_kernel``) exactly as the launcher plans it
on an H200 (132 SMs; :func:`h200_planner`) at the bench shape and ``--batch`` (the whole-head work items of a large
batch), and adds what the instructions are: ``nvdisasm`` of the cubin, the instruction count of each innermost loop
(:func:`sass_loops`; the first is the whole-head item's flush sub-block loop, per warp and sub-block), that count
per state element of a thread, and its mix by instruction class. ``--dots``: ``plan`` (the launcher's flush-dot
precision) and / or ``ieee`` / ``tf32x3``; ``--knobs``: launcher knob sets, as for ``--nonflush``. ``--tree DIR`` compiles another checkout's kernels (e.g. a
``git worktree`` of an earlier commit) with this script, for an A/B of a kernel change.

``--nonflush`` compiles the split step's non-flush launch (``kernels.nonflush._nonflush_kernel``) the same way, for
each ``--knobs`` set (``;``-separated, ``name=value,...`` as ``kernels.bench.parse_knobs``; ``default``: the plan),
and counts the SASS of one program (``n_local``: the spill loads and stores; ``chunk_loop``: a staged kernel's key-chunk
loop, run ``BK / KC`` times, and its shuffles and fp32 adds, the reductions' share).

``--nvfp4-items`` compiles ``kernels.nvfp4_items._nvfp4_part_kernel`` as the GPU launcher plans it for the bench
shape at B = 64 (split step, 16-row sub-blocks, 3xTF32 dots, 4 warps, the 128-register cap), for each
``flush_nvfp4_item_blocks`` value (0: decided on the device).

Occupancy follows from the table: 65536 registers per SM, so a program of W warps at R registers leaves
``65536 // (32 W R)`` programs per SM; 228 KB of shared memory per SM bounds it too.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import subprocess
import sys
import tempfile

import pandas as pd
import torch
import triton
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import native_specialize_impl


def _tree_root(argv) -> str:
    """The checkout whose kernels are compiled: ``--tree DIR`` (read before the package is imported), else this one."""
    for i, a in enumerate(argv):
        if a == "--tree" and i + 1 < len(argv):
            return os.path.abspath(argv[i + 1])
        if a.startswith("--tree="):
            return os.path.abspath(a.split("=", 1)[1])
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


ROOT = _tree_root(sys.argv)
if not os.path.isfile(os.path.join(ROOT, "replayssm_quant", "__init__.py")):
    sys.exit(f"ptxas_report: --tree {ROOT}: not a replayssm-quant checkout (no replayssm_quant/__init__.py)")
sys.path.insert(0, ROOT)
import replayssm_quant.kernels.verify as verify  # noqa: E402
from replayssm_quant.kernels.bench import SHAPES, parse_knobs  # noqa: E402
try:   # (a --tree from before 2026-12-07 has no check_grid: its families are then checked against its SHAPES only)
    from replayssm_quant.kernels.bench import check_grid  # noqa: E402
except ImportError:
    check_grid = None
from replayssm_quant.kernels.launch import DOT_PRECISIONS, LaunchKnobs  # noqa: E402
from replayssm_quant.kernels.spec_bench import spec_inputs  # noqa: E402
from replayssm_quant.kernels.state_cache import SSMStateCache  # noqa: E402

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
PTXAS = os.path.join(BIN, "ptxas")
H200_SMS = 132
#: SASS opcode -> class of the ``--flush`` mix
SASS_CLASSES = {"FFMA": "fp32 fma", "FMUL": "fp32 mul/add", "FADD": "fp32 mul/add", "FMNMX": "fp32 other",
                "FSEL": "fp32 other", "FSETP": "fp32 other", "FRND": "fp32 other", "MUFU": "fp32 other",
                "HMMA": "tensor core", "SHFL": "shuffle", "LDS": "shared", "STS": "shared", "LDSM": "shared",
                "STSM": "shared", "LDG": "global", "STG": "global", "BAR": "barrier"}


class _Recorder:
    """Stands in for the kernel object: ``kernel[grid](**kw)`` records ``kw`` instead of launching."""

    def __init__(self):
        self.kwargs = None
        self.grid = None

    def __getitem__(self, grid):
        def launch(**kw):
            self.kwargs, self.grid = kw, grid
        return launch


def _key_heads_kwargs(shape: dict, shared_keys: bool) -> dict:
    """``SSMStateCache``'s key-head argument for a bench ``shape``: its ``num_key_heads`` with ``shared_keys``, else
    none (a key per value head; a checkout from before shared keys has no such argument, and ``--tree`` may be one)."""
    return dict(num_key_heads=shape["num_key_heads"]) if shared_keys and "num_key_heads" in shape else {}


def verify_launch_kwargs(family: str, spec: str, T: int = 8, window: int = 16, shared_keys: bool = True) -> dict:
    """The keyword arguments :func:`~.verify.triton_verify` passes for the benchmark shape of ``family`` (with
    ``shared_keys``, the shape's key heads, as the models have them)."""
    shape = SHAPES[family]
    keys = _key_heads_kwargs(shape, shared_keys)
    cache = SSMStateCache(family, spec, 2, shape["num_heads"], shape["head_k"], shape["head_v"], window=window,
                          mode="replay", backend="torch", seed=1, max_draft=T, **keys)
    x = spec_inputs(family, 2, T, shape, torch.device("cpu"))
    out = torch.empty(2, T, shape["num_heads"], shape["head_v"])
    rec, kernel = _Recorder(), verify._verify_kernel
    verify._verify_kernel = rec
    try:
        verify.triton_verify(cache, torch.arange(2, dtype=torch.int32), x["q"], x["k_heads"] if keys else x["k"],
                             x["v"], x["g"], x["beta"], None, False, out)
    finally:
        verify._verify_kernel = kernel
    return {k: v for k, v in rec.kwargs.items() if k not in ("num_warps", "num_stages", "maxnreg")}


def jit_specialization(value) -> tuple[str, bool]:
    """``(type, aligned)`` of a launch argument as Triton's JIT specializes it (``native_specialize_impl``):
    ``"constexpr"`` for an integer 1; ``aligned``: a tensor's address, an integer's value is a multiple of 16.
    A recorded CPU tensor stands for the GPU one: the same offsets from allocations aligned to 64 bytes or more."""
    ty, key = native_specialize_impl(BaseBackend, value, False, True, True)
    return ty, "D" in str(key)


def ptxas_info(fn, kwargs: dict, num_warps: int, num_stages: int = 3, maxnreg: int | None = None,
               sass: bool = False, ptx: bool = False) -> dict:
    """Compile ``fn`` for sm_90 with ``kwargs`` (and a register cap, as a launch's ``maxnreg``) and return
    registers, spill bytes and shared memory (``sass``: also the cubin's ``nvdisasm`` text as ``"sass"``; ``ptx``:
    the PTX as ``"ptx"``).

    Each argument is specialized as the JIT specializes a launch's (:func:`jit_specialization`): a pointer whose
    address and an integer whose value is a multiple of 16 get ``tt.divisibility = 16`` (vector loads), an integer
    1 becomes a constant. Without that a compile sees unaligned pointers and differs from the GPU's."""
    sig, consts, attrs = {}, {}, {}
    for i, p in enumerate(fn.params):
        v = kwargs.get(p.name, p.default)
        if p.is_constexpr or v is None:
            sig[p.name], consts[(i,)] = "constexpr", v
        elif isinstance(v, (torch.Tensor, int)):
            ty, aligned = jit_specialization(v)
            if ty == "constexpr":
                sig[p.name], consts[(i,)] = "constexpr", v
            else:
                sig[p.name] = ty
                if aligned:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            raise TypeError(f"argument {p.name}: {type(v).__name__} is not handled")
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=num_warps, num_stages=num_stages,
                                    **({"maxnreg": maxnreg} if maxnreg else {})))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(k.asm["ptx"])
        log = subprocess.run([PTXAS, "-v", "-arch=sm_90a", path, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True, check=True).stderr
        text = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", os.path.join(d, "k.cubin")], capture_output=True,
                              text=True, check=True).stdout if sass else None
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    st, ld = map(int, re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log).groups())
    info = dict(regs=regs, spill_store_B=st, spill_load_B=ld, smem_B=k.metadata.shared,
                programs_per_sm_by_regs=65536 // (32 * num_warps * max(regs, 1)))
    if sass:
        info["sass"] = text
    if ptx:
        info["ptx"] = k.asm["ptx"]
    return info


def compile_launch(fn, kw: dict, sass: bool = False, ptx: bool = False) -> tuple[dict, dict]:
    """Compile ``fn`` offline (:func:`ptxas_info`) with a recorded launch's keywords ``kw`` (:func:`split_launch_kwargs`):
    returns the launch options taken out of ``kw`` (``num_warps``, ``num_stages``, ``maxnreg``; ``kw`` keeps the
    kernel's arguments) and the compile's info."""
    opts = {k: kw.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kw}
    return opts, ptxas_info(fn, kw, opts["num_warps"], opts.get("num_stages", 3), maxnreg=opts.get("maxnreg"),
                            sass=sass, ptx=ptx)


def resident_programs(info: dict, num_warps: int) -> int:
    """Programs of ``num_warps`` warps one H200 SM holds at once: the least of the register limit
    (``programs_per_sm_by_regs``), the shared-memory limit (228 KB per SM, 227 KB per block usable, 1 KB reserved
    per block) and 64 warps / 32 blocks per SM."""
    by_smem = (228 * 1024) // (info["smem_B"] + 1024)
    return min(info["programs_per_sm_by_regs"], by_smem, 64 // num_warps, 32)


def _sass_listing(sass: str) -> tuple[list[tuple[int, str, str]], dict[str, int]]:
    """An ``nvdisasm -c`` listing -> its instructions ``(address, opcode, operands)`` and its labels' addresses."""
    ins, labels, pending = [], {}, []
    for line in sass.splitlines():
        m = re.match(r"\s*\.(L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)(\S*)\s*([^;]*);", line)
        if m:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            ins.append((addr, m.group(2), m.group(4)))
    return ins, labels


def sass_loops(sass: str) -> list[list[str]]:
    """The innermost loops of an ``nvdisasm -c`` listing, in address order: for each, its opcodes (a loop = a
    backward branch to a label; innermost = no other such loop inside its range)."""
    ins, labels = _sass_listing(sass)
    loops = []
    for addr, op, args in ins:
        t = re.search(r"\.?(L_x_\d+)", args) if op == "BRA" else None
        if t and labels.get(t.group(1), addr + 1) <= addr:
            loops.append((labels[t.group(1)], addr))
    inner = [(lo, hi) for lo, hi in loops if not any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in loops)]
    return [[op for a, op, _ in ins if lo <= a <= hi] for lo, hi in sorted(set(inner))]


@contextlib.contextmanager
def h200_planner(sms: int = H200_SMS):
    """:mod:`kernels.launch` plans as on an H200 (``_on_gpu`` true, ``sms`` SMs) inside the block, on a CPU cache."""
    import replayssm_quant.kernels.launch as launch

    saved = launch._on_gpu, launch._num_sms
    launch._on_gpu, launch._num_sms = (lambda cache: True), (lambda device: sms)
    try:
        yield
    finally:
        launch._on_gpu, launch._num_sms = saved


def split_launch_kwargs(family: str, spec: str, batch: int, kernel: str = "flush", knobs: dict | None = None,
                        shared_keys: bool = True) -> dict:
    """The keyword arguments (launch options included) of the split step's ``kernel`` (``"flush"``:
    ``_flush_kernel``; ``"nonflush"``: ``_nonflush_kernel``; ``"part"``: ``_nvfp4_part_kernel``, launched when the
    plan has nvfp4 sub-block items), or with ``kernel="fused"`` of the fused step's ``_decode_step_kernel`` (small
    grids, e.g. batch 1), for ``batch`` rows of the bench shape as the launcher
    plans it on an H200 with ``knobs`` (:class:`LaunchKnobs` fields), recorded from the launcher's own call on a CPU
    cache (:func:`h200_planner`; no launch)."""
    import replayssm_quant.kernels.flush as flush
    import replayssm_quant.kernels.fused as fused
    import replayssm_quant.kernels.nonflush as nonflush
    import replayssm_quant.kernels.nvfp4_items as items
    from replayssm_quant.kernels.bench import bench_inputs
    from replayssm_quant.kernels.decode import triton_step
    from replayssm_quant.kernels.launch import LaunchKnobs, plan_step

    shape = SHAPES[family]
    keys = _key_heads_kwargs(shape, shared_keys)   # the bench shape's key heads, as the benchmark times them
    rec = _Recorder()
    stand_ins = dict(part=_Recorder(), flush=_Recorder(), nonflush=_Recorder(), rows=_Recorder(), fused=_Recorder())
    stand_ins[kernel] = rec
    saved = (items._nvfp4_part_kernel, flush._flush_kernel, nonflush._nonflush_kernel, flush._flush_rows_kernel,
             fused._decode_step_kernel)
    with h200_planner():
        cache = SSMStateCache(family, spec, batch, shape["num_heads"], shape["head_k"], shape["head_v"], window=16,
                              mode="replay", backend="torch", seed=1,
                              knobs=LaunchKnobs(flush_stream=0, **(knobs or {})), **keys)
        plan = plan_step(cache, batch)
        if plan.split == (kernel == "fused"):
            raise SystemExit(f"ptxas_report: {family} {spec} at batch {batch} is a {'split' if plan.split else 'fused'}"
                             f" step on an H200 (no {kernel} launch); take a {'smaller' if plan.split else 'larger'} "
                             "--batch")
        x = bench_inputs(family, batch, shape, 1, torch.device("cpu"))
        if keys:
            x["k"] = x["k_heads"]
        items._nvfp4_part_kernel, flush._flush_kernel = stand_ins["part"], stand_ins["flush"]
        nonflush._nonflush_kernel, flush._flush_rows_kernel = stand_ins["nonflush"], stand_ins["rows"]
        fused._decode_step_kernel = stand_ins["fused"]
        try:
            # as SSMStateCache.step calls it: a fused step that advances its counters gets the arrival counts
            triton_step(cache, torch.arange(batch, dtype=torch.int32), *(None if x[n] is None else x[n][0]
                                                                          for n in ("q", "k", "v", "g", "beta")),
                        advance=kernel == "fused" and plan.step_advance)
        finally:
            (items._nvfp4_part_kernel, flush._flush_kernel, nonflush._nonflush_kernel, flush._flush_rows_kernel,
             fused._decode_step_kernel) = saved
    if rec.kwargs is None:
        raise SystemExit(f"ptxas_report: the step of {family} {spec} at batch {batch} launches no {kernel} kernel")
    maxnreg = (plan.maxnreg if kernel == "fused" else plan.nonflush.maxnreg if kernel == "nonflush"
               else plan.flush.items_maxnreg if kernel == "part" else plan.flush.maxnreg)
    return dict(rec.kwargs, maxnreg=maxnreg, _grid=rec.grid)


def _mix(ops) -> dict:
    mix = {}
    for op in ops:
        cls = SASS_CLASSES.get(op, "integer / other")
        mix[f"n_{cls}"] = mix.get(f"n_{cls}", 0) + 1
    return dict(sorted(mix.items()))


def nonflush_report(a, kernel: str = "nonflush") -> list[dict]:
    """``--nonflush``: ``_nonflush_kernel`` per family, spec and ``--knobs`` variant: registers, spills and the SASS
    of one program (its chunk loop is unrolled unless staged: then ``chunk_loop`` is its body), local-memory (spill)
    instructions counted apart. ``kernel="fused"`` (``--fused``): the same for the fused step's
    ``_decode_step_kernel`` (the batch-1 step)."""
    import replayssm_quant.kernels.fused as fused
    import replayssm_quant.kernels.nonflush as nonflush
    from replayssm_quant.kernels.bench import parse_knobs

    rows = []
    for fam, spec, variant in itertools.product(a.families.split(","), a.specs.split(","), a.knobs.split(";")):
        kw = split_launch_kwargs(fam, spec, a.batch, kernel, parse_knobs(variant), a.keys == "shared")
        fn = fused._decode_step_kernel if kernel == "fused" else nonflush._nonflush_kernel
        opts, info = compile_launch(fn, kw, sass=True)
        sass = info.pop("sass")
        ops = [op for _, op, _ in _sass_listing(sass)[0]]
        loops = [x for x in sass_loops(sass) if len(x) > 1]   # (a staged kernel's chunk loop)
        rows.append(dict(family=fam, spec=spec, knobs=variant.strip() or "default", warps=opts["num_warps"],
                         maxnreg=opts.get("maxnreg"), stages=kw.get("STAGES"), **info, instr=len(ops),
                         n_local=sum(op in ("LDL", "STL") for op in ops),
                         chunk_loop=len(loops[0]) if loops else 0,
                         chunk_loop_shuffle_add=sum(op in ("SHFL", "FADD") for op in loops[0]) if loops else 0,
                         **_mix(ops)))
        print(rows[-1], flush=True)
    return rows


def flush_report(a) -> list[dict]:
    """``--flush``: ``_flush_kernel`` per family, spec, ``--dots`` value and ``--knobs`` set (a ``flush_dot`` in a
    knob set wins over ``--dots``)."""
    import replayssm_quant.kernels.flush as flush
    from replayssm_quant.kernels.bench import parse_knobs

    rows = []
    for fam, spec, dot, variant in itertools.product(a.families.split(","), a.specs.split(","), a.dots.split(","),
                                                     a.knobs.split(";")):
        knobs = ({} if dot == "plan" else {"flush_dot": dot}) | parse_knobs(variant)
        kw = split_launch_kwargs(fam, spec, a.batch, "flush", knobs, a.keys == "shared")
        opts, info = compile_launch(flush._flush_kernel, kw, sass=True)
        loops = sass_loops(info.pop("sass"))
        sub = loops[0] if loops else []
        per_thread = kw["BVF"] * kw["BK"] // (32 * opts["num_warps"])   # state elements of a thread per sub-block
        rows.append(dict(family=fam, spec=spec, dot=kw["DOTP"], knobs=variant.strip() or "default", BVF=kw["BVF"],
                         warps=opts["num_warps"], maxnreg=opts.get("maxnreg"), **info, loop_instr=len(sub),
                         instr_per_elem=round(len(sub) / per_thread, 1),
                         inner_loops=";".join(str(len(x)) for x in loops),
                         program_loop_instr=opts["num_warps"] * sum(len(x) for x in loops if len(x) > 1),
                         grid_programs_per_sm=kw["_grid"][0] // H200_SMS,
                         resident_programs_per_sm=resident_programs(info, opts["num_warps"]), **_mix(sub)))
        print(rows[-1], flush=True)
    return rows


def nvfp4_part_launch_kwargs(family: str, spec: str, knobs: dict | None = None, shared_keys: bool = True) -> dict:
    """The keyword arguments of ``_nvfp4_part_kernel`` in the split step of the bench shape at B = 64 as planned on an
    H200 with ``knobs`` (:func:`split_launch_kwargs`; by default sub-block items, 16-row sub-blocks, 3xTF32 dots, 4
    warps)."""
    return split_launch_kwargs(family, spec, 64, "part", knobs, shared_keys)


def nvfp4_items_report(a) -> list[dict]:
    """``--nvfp4-items``: ``_nvfp4_part_kernel`` per family, spec, ``--knobs`` set and ``--item-blocks`` value:
    registers, spills and its innermost SASS loops (instructions per warp)."""
    import replayssm_quant.kernels.nvfp4_items as items
    from replayssm_quant.kernels.bench import parse_knobs

    rows = []
    for fam, spec, variant in itertools.product(a.families.split(","), a.specs.split(","), a.knobs.split(";")):
        kw = nvfp4_part_launch_kwargs(fam, spec, parse_knobs(variant), a.keys == "shared")
        for nvg in map(int, a.item_blocks.split(",")):
            opts, info = compile_launch(items._nvfp4_part_kernel, dict(kw, NVG=nvg), sass=True)
            loops = sass_loops(info.pop("sass"))
            rows.append(dict(family=fam, spec=spec, knobs=variant.strip() or "default", dot=kw["DOTP"],
                             item_blocks=nvg, warps=opts["num_warps"], **info,
                             inner_loops=";".join(str(len(x)) for x in loops)))
            print(rows[-1], flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--families", default="mamba2,gdn,kda")
    p.add_argument("--specs", default="fp32,nvfp4/fp16")
    p.add_argument("--block-v", default="16,32,64")
    p.add_argument("--split", default="1", help="programs per (row, head) over its V-blocks (verify_split)")
    p.add_argument("--warps", default="4,8,16")
    p.add_argument("--dots", default=None, help="dot input precisions: the verify_dot knob (default ieee); with "
                   "--flush 'plan' (the launcher's, the default) or a flush_dot knob value")
    p.add_argument("--nvfp4-items", action="store_true", help="pass 1 of the nvfp4 flush items instead")
    p.add_argument("--flush", action="store_true", help="the split step's flush launch instead, with its SASS loops")
    p.add_argument("--nonflush", action="store_true", help="the split step's non-flush launch instead, per --knobs")
    p.add_argument("--fused", action="store_true", help="the fused step's kernel instead (small grids: take --batch 1), "
                   "per --knobs, with the counters' advance where the plan puts it in the launch")
    p.add_argument("--knobs", default="default", help="';'-separated launcher knob sets (--flush, --nonflush, "
                   "--nvfp4-items; name=value,...)")
    p.add_argument("--batch", type=int, default=256, help="rows of the planned step (--flush, --nonflush, --fused)")
    p.add_argument("--tree", default=None, help="compile this checkout's kernels (read before the imports)")
    p.add_argument("--keys", choices=("shared", "per-head"), default="shared",
                   help="the caches' keys once per key head of the bench shape (shared, as the benchmark times them "
                        "and the models have them) or once per value head")
    p.add_argument("--item-blocks", default="0,1,2,4", help="flush_nvfp4_item_blocks values (--nvfp4-items)")
    p.add_argument("--csv", default=None)
    a = p.parse_args(argv)
    if sum((a.nvfp4_items, a.flush, a.nonflush, a.fused)) > 1:
        p.error("--nvfp4-items, --flush, --nonflush and --fused: one at a time")
    a.dots = a.dots or ("plan" if a.flush else "ieee")
    try:   # the arguments checked before anything compiles: one line per mistake, not a traceback
        if check_grid is not None:
            check_grid(a.families, a.specs)
        elif set(a.families.split(",")) - set(SHAPES):
            raise ValueError(f"families {a.families!r}: allowed {', '.join(SHAPES)}")
        for text in a.knobs.split(";"):
            LaunchKnobs(**parse_knobs(text))
        ints = {}
        for n in ("block_v", "split", "warps", "item_blocks"):
            try:
                ints[n] = [int(x) for x in getattr(a, n).split(",")]
            except ValueError:
                raise ValueError(f"--{n.replace('_', '-')} {getattr(a, n)!r}: a comma list of integers") from None
        if a.batch < 1 or min(ints["block_v"] + ints["split"] + ints["warps"]) < 1 or min(ints["item_blocks"]) < 0:
            raise ValueError("--batch, --block-v, --split and --warps must be positive, --item-blocks >= 0 (0: decided "
                             "on the device)")
        for d in a.dots.split(","):
            if d not in DOT_PRECISIONS + (("plan",) if a.flush else ()):
                raise ValueError(f"--dots {d!r}: allowed {', '.join(DOT_PRECISIONS + (('plan',) if a.flush else ()))}")
        for w in ints["warps"]:
            LaunchKnobs(verify_warps=w)
    except ValueError as e:
        p.error(str(e))
    rows = (nvfp4_items_report(a) if a.nvfp4_items else flush_report(a) if a.flush
            else nonflush_report(a) if a.nonflush else nonflush_report(a, "fused") if a.fused else [])
    for fam in [] if a.nvfp4_items or a.flush or a.nonflush or a.fused else a.families.split(","):
        for spec in a.specs.split(","):
            kw = verify_launch_kwargs(fam, spec, shared_keys=a.keys == "shared")
            for bv in map(int, a.block_v.split(",")):
                blocks = triton.cdiv(SHAPES[fam]["head_v"], bv)
                for split in sorted({min(int(x), blocks) for x in a.split.split(",")}):
                    nvb = triton.cdiv(blocks, split)
                    for w in map(int, a.warps.split(",")):
                        for dot in a.dots.split(","):
                            info = ptxas_info(verify._verify_kernel, dict(kw, BV=bv, NVB=nvb, DOTP=dot), w)
                            rows.append(dict(family=fam, spec=spec, block_v=bv, split=split, warps=w, dot=dot, **info))
                            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    print(df.to_string(index=False))
    if a.csv:
        df.to_csv(a.csv, index=False)


if __name__ == "__main__":
    main()
