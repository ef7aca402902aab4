"""Registers, spills and shared memory of a decode kernel on sm_90, compiled OFFLINE (no GPU): the speculative verify
kernel, or (``--nvfp4-items``) pass 1 of the nvfp4 flush items of few flush rows.

Triton compiles ``kernels.verify._verify_kernel`` for an H100/H200 target exactly as :func:`~.verify.triton_verify`
would launch it (its keyword arguments captured from a real call on a CPU cache, the launch itself replaced by a
recorder in this script), then the bundled ``ptxas -v`` reads the PTX. The interpreter cannot show any of this (nor
compile errors); a row here is what a GPU launch of that config would get. Prints one table:

    python scripts/ptxas_report.py [--families mamba2,gdn,kda] [--specs fp32,nvfp4/fp16] [--block-v 16,32,64]
                                   [--split 1,2] [--warps 4,8,16] [--dots ieee,tf32x3] [--csv OUT.csv]
    python scripts/ptxas_report.py --nvfp4-items [--families gdn,kda] [--specs nvfp4/fp16] [--item-blocks 0,1,2,4]

``--nvfp4-items`` compiles ``kernels.nvfp4_items._nvfp4_part_kernel`` as the GPU launcher plans it for the bench
shape at B = 64 (split step, 16-row sub-blocks, 3xTF32 dots, 4 warps, the 128-register cap), for each
``flush_nvfp4_item_blocks`` value (0: decided on the device).

Occupancy follows from the table: 65536 registers per SM, so a program of W warps at R registers leaves
``65536 // (32 W R)`` programs per SM; 228 KB of shared memory per SM bounds it too.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import pandas as pd
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
import replayssm_quant.kernels.verify as verify  # noqa: E402
from replayssm_quant.kernels.bench import SHAPES  # noqa: E402
from replayssm_quant.kernels.spec_bench import spec_inputs  # noqa: E402
from replayssm_quant.kernels.state_cache import SSMStateCache  # noqa: E402

PTR = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.int32: "*i32",
       torch.int64: "*i64", torch.uint8: "*u8", torch.int8: "*i8", torch.int16: "*i16"}
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


class _Recorder:
    """Stands in for the kernel object: ``kernel[grid](**kw)`` records ``kw`` instead of launching."""

    def __init__(self):
        self.kwargs = None

    def __getitem__(self, grid):
        def launch(**kw):
            self.kwargs = kw
        return launch


def verify_launch_kwargs(family: str, spec: str, T: int = 8, window: int = 16) -> dict:
    """The keyword arguments :func:`~.verify.triton_verify` passes for the benchmark shape of ``family``."""
    shape = SHAPES[family]
    cache = SSMStateCache(family, spec, 2, shape["num_heads"], shape["head_k"], shape["head_v"], window=window,
                          mode="replay", backend="torch", seed=1, max_draft=T)
    x = spec_inputs(family, 2, T, shape, torch.device("cpu"))
    out = torch.empty(2, T, shape["num_heads"], shape["head_v"])
    rec, kernel = _Recorder(), verify._verify_kernel
    verify._verify_kernel = rec
    try:
        verify.triton_verify(cache, torch.arange(2, dtype=torch.int32), x["q"], x["k"], x["v"], x["g"], x["beta"],
                             None, False, out)
    finally:
        verify._verify_kernel = kernel
    return {k: v for k, v in rec.kwargs.items() if k not in ("num_warps", "num_stages", "maxnreg")}


def ptxas_info(fn, kwargs: dict, num_warps: int, num_stages: int = 3, maxnreg: int | None = None) -> dict:
    """Compile ``fn`` for sm_90 with ``kwargs`` (and a register cap, as a launch's ``maxnreg``) and return
    registers, spill bytes and shared memory."""
    sig, consts = {}, {}
    for i, p in enumerate(fn.params):
        v = kwargs.get(p.name, p.default)
        if p.is_constexpr or v is None:
            sig[p.name], consts[(i,)] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[p.name] = PTR[v.dtype]
        elif isinstance(v, int) and not isinstance(v, bool):
            sig[p.name] = "i32"
        else:
            raise TypeError(f"argument {p.name}: {type(v).__name__} is not handled")
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=num_warps, num_stages=num_stages,
                                    **({"maxnreg": maxnreg} if maxnreg else {})))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(k.asm["ptx"])
        log = subprocess.run([PTXAS, "-v", "-arch=sm_90a", path, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True, check=True).stderr
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    st, ld = map(int, re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log).groups())
    return dict(regs=regs, spill_store_B=st, spill_load_B=ld, smem_B=k.metadata.shared,
                programs_per_sm_by_regs=65536 // (32 * num_warps * max(regs, 1)))


def nvfp4_part_launch_kwargs(family: str, spec: str) -> dict:
    """The keyword arguments (launch options included) of ``_nvfp4_part_kernel`` in a GPU split step of the bench
    shape: the launcher's own call on a CPU cache with the GPU plan's knobs, every launch of the step recorded."""
    import replayssm_quant.kernels.flush as flush
    import replayssm_quant.kernels.nonflush as nonflush
    import replayssm_quant.kernels.nvfp4_items as items
    from replayssm_quant.kernels.bench import bench_inputs
    from replayssm_quant.kernels.decode import triton_step
    from replayssm_quant.kernels.launch import LaunchKnobs

    shape = SHAPES[family]
    knobs = LaunchKnobs(split_flush=True, flush_nvfp4_items=True, flush_dot="tf32x3", flush_block_v=16, block_v=32)
    cache = SSMStateCache(family, spec, 2, shape["num_heads"], shape["head_k"], shape["head_v"], window=16,
                          mode="replay", backend="torch", seed=1, knobs=knobs)
    x = bench_inputs(family, 2, shape, 16, torch.device("cpu"))
    rec = _Recorder()
    saved = items._nvfp4_part_kernel, flush._flush_kernel, nonflush._nonflush_kernel
    items._nvfp4_part_kernel, flush._flush_kernel, nonflush._nonflush_kernel = rec, _Recorder(), _Recorder()
    try:
        triton_step(cache, torch.arange(2, dtype=torch.int32), *(None if x[n] is None else x[n][0]
                                                                  for n in ("q", "k", "v", "g", "beta")))
    finally:
        items._nvfp4_part_kernel, flush._flush_kernel, nonflush._nonflush_kernel = saved
    return rec.kwargs


def nvfp4_items_report(a) -> list[dict]:
    import replayssm_quant.kernels.nvfp4_items as items

    rows = []
    for fam in a.families.split(","):
        for spec in a.specs.split(","):
            kw = nvfp4_part_launch_kwargs(fam, spec)
            opts = {k: kw.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kw}
            for nvg in map(int, a.item_blocks.split(",")):
                info = ptxas_info(items._nvfp4_part_kernel, dict(kw, NVG=nvg), opts["num_warps"],
                                  opts.get("num_stages", 3), maxnreg=128)
                rows.append(dict(family=fam, spec=spec, item_blocks=nvg, warps=opts["num_warps"], **info))
                print(rows[-1], flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default="mamba2,gdn,kda")
    p.add_argument("--specs", default="fp32,nvfp4/fp16")
    p.add_argument("--block-v", default="16,32,64")
    p.add_argument("--split", default="1", help="programs per (row, head) over its V-blocks (verify_split)")
    p.add_argument("--warps", default="4,8,16")
    p.add_argument("--dots", default="ieee", help="dot input precisions (the verify_dot knob)")
    p.add_argument("--nvfp4-items", action="store_true", help="pass 1 of the nvfp4 flush items instead")
    p.add_argument("--item-blocks", default="0,1,2,4", help="flush_nvfp4_item_blocks values (--nvfp4-items)")
    p.add_argument("--csv", default=None)
    a = p.parse_args(argv)
    rows = nvfp4_items_report(a) if a.nvfp4_items else []
    for fam in [] if a.nvfp4_items else a.families.split(","):
        for spec in a.specs.split(","):
            kw = verify_launch_kwargs(fam, spec)
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
