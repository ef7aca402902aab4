"""scripts/gpu/read_ceiling.py, launch_floor.py and profile_step.py: their CPU smoke runs (the interpreter, tiny shapes)
write their tables, and the format reads and stand-in kernels compute what they claim (checked inside the scripts
against torch: the decoded state times x, the slot's state times q, the written-back tiles)."""

import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke runs")


def _run(script, args):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu", script), *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


def test_read_ceiling_format_reads(tmp_path):
    r = _run("read_ceiling.py", ["--cpu-smoke", "--formats", "fp32,fp16,fp8,int8,nvfp4", "--out", str(tmp_path)])
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_csv(tmp_path / "read_ceiling.csv")
    assert [k.split()[0] for k in df.kernel] == ["fp32", "fp16", "fp8", "int8", "nvfp4"]
    mb = df.set_index(df.kernel.str.split().str[0]).MB   # stored bytes: codes and scales
    assert mb["fp32"] == 2 * mb["fp16"] and mb["fp8"] == mb["int8"] == pytest.approx(mb["fp32"] / 4 * (1 + 4 / 128))
    assert mb["nvfp4"] == pytest.approx(mb["fp32"] * 4.5 / 32 + 4 * 4 / 1e6)
    r = _run("read_ceiling.py", ["--cpu-smoke", "--formats", "fp5", "--out", str(tmp_path)])
    assert r.returncode == 2 and "'fp5' is not a read format this script times" in r.stderr
    r = _run("read_ceiling.py", ["--cpu-smoke", "--formats", "e4m3", "--out", str(tmp_path)])
    assert r.returncode == 2 and "allowed fp32, fp16, bf16, fp8, int8, nvfp4" in r.stderr


def test_launch_floor(tmp_path):
    r = _run("launch_floor.py", ["--cpu-smoke", "--out", str(tmp_path)])
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_csv(tmp_path / "launch_floor.csv")
    assert len(df) == 8 and (df.us_per_step > 0).all()
    assert df[df.variant.str.contains("advance")].launches_per_step.eq(2).all()
    read_mb = df[df.variant.str.startswith("read (")].state_MB.item()
    assert read_mb > 0 and (df[df.variant.str.startswith("read+write")].state_MB == 2 * read_mb).all()


def test_profile_step_stagger_and_ncu_window(tmp_path):
    args = ["--cpu-smoke", "--families", "gdn", "--specs", "nvfp4/fp16", "--window", "4", "--no-conventional"]
    r = _run("profile_step.py", args + ["--batch", "1,2", "--rounds", "1", "--stagger", "--out", str(tmp_path / "p")])
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_csv(tmp_path / "p" / "profile.csv")
    assert set(df["mode"]) == {"replay", "replay staggered"} and set(df.batch) == {1, 2}
    assert set(df.key_heads) == {1}   # the smoke shape's 2 value heads share one key head, as bench.py times them
    assert (df.total_us > 0).all()    # (the CPU smoke reports the interpreted ops' CPU time)
    r = _run("profile_step.py", ["--cpu-smoke", "--families", "rwkv", "--out", str(tmp_path / "bad")])
    assert r.returncode == 2 and "unknown families ['rwkv']" in r.stderr
    assert not (tmp_path / "p" / "profile.partial.csv").exists()
    r = _run("profile_step.py", args + ["--batch", "2", "--rounds", "1", "--keys", "per-head", "--out",
                                        str(tmp_path / "h")])
    assert r.returncode == 0, r.stderr[-2000:]
    assert set(pd.read_csv(tmp_path / "h" / "profile.csv").key_heads) == {2}
    # launcher knobs reach the caches (8-row programs: the 16-row heads flush in pairs of programs)
    r = _run("profile_step.py", args + ["--batch", "1", "--rounds", "1", "--knobs", "block_v=8", "--out",
                                        str(tmp_path / "k")])
    assert r.returncode == 0, r.stderr[-2000:]
    assert set(pd.read_csv(tmp_path / "k" / "profile.csv").knobs) == {"block_v=8"}
    r = _run("profile_step.py", args + ["--knobs", "block_v=6", "--out", str(tmp_path / "bad")])
    assert r.returncode == 2 and "--knobs 'block_v=6': block_v=6: a power of two" in r.stderr, r.stderr[-500:]
    r = _run("profile_step.py", args + ["--batch", "2", "--rounds", "0", "--ncu-window", "--out", str(tmp_path / "n")])
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (tmp_path / "n" / "profile.csv").exists()   # (no table: the steps are for an outside profiler)


@pytest.mark.parametrize("time_unit", ["nsecond", "ns"])     # ncu 2025 (the H200's) writes "ns"
def test_limits_summary_reads_an_ncu_raw_export(tmp_path, time_unit):
    """A raw export as ``ncu -i R --page raw --csv --print-units base`` writes it (a message line, the header, the
    units row, one row per launch) -> the summary's MB, microseconds, GB/s and stall order."""
    (tmp_path / "x_raw.csv").write_text(
        "==WARNING== something\n"
        '"ID","Kernel Name","Grid Size","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum",'
        '"launch__registers_per_thread","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","inst_executed","launch__grid_size",'
        '"launch__block_size","smsp__average_warp_latency_per_inst_issued.ratio"\n'
        f'"","","","{time_unit}","byte","byte","register/thread","ratio","ratio","inst","","","cycle"\n'
        '"0","_nonflush_kernel","(1, 32, 256)","85,000","300000000","40000000","128","7.5","1.25","1,638,400",'
        '"8192","64","9.5"\n')
    (tmp_path / "failed_raw.csv").write_text("==ERROR== no counters\n")
    r = _run("limits_summary.py", [str(tmp_path)])
    assert r.returncode == 0, r.stderr[-2000:]
    df = pd.read_csv(tmp_path / "ncu_summary.csv")
    row = df.iloc[0]
    assert len(df) == 1 and row.kernel == "_nonflush_kernel" and row.us == 85.0 and row.dram_read_MB == 300.0
    assert row.dram_GBps == pytest.approx(340e6 / 85e-6 / 1e9) and row.regs_per_thread == 128
    assert row.top_stalls == "long_scoreboard 7.5, wait 1.2"
    assert row.inst_per_warp == 100.0 and row.cycles_per_issue == 9.5   # 1638400 warp instructions / 16384 warps


def test_ptxas_report_nvfp4_items_launch_is_the_gpu_plan():
    """scripts/ptxas_report.py --nvfp4-items compiles pass 1 with the keywords the launcher passes on the GPU at the
    bench shape (16-row sub-blocks, 3xTF32 dots, 2 warps: gdn's items with 3xTF32 dots), recorded from a real step
    on a CPU cache (no launch)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import ptxas_report
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    kw = ptxas_report.nvfp4_part_launch_kwargs("gdn", "nvfp4/fp16")
    assert (kw["BVF"], kw["NVF"], kw["DOTP"], kw["num_warps"], kw["K"], kw["V"]) == (16, 8, "tf32x3", 2, 128, 128)
    assert kw["scr_ptr"].numel() % (8 * 16 * 128) == 0 and kw["amx_ptr"] is not None   # per program: NVF x BVF x BK
    # the items' own dot precision (flush_items_dot; by default IEEE for a row-scaled 8-bit SR checkpoint) reaches
    # pass 1 and leaves the flush launch's (pass 2, whole heads) at the plan's
    items = ptxas_report.nvfp4_part_launch_kwargs("gdn", "nvfp4/fp16", {"flush_items_dot": "ieee"})
    assert items["DOTP"] == "ieee"
    assert ptxas_report.nvfp4_part_launch_kwargs("kda", "nvfp4/int8+sr")["DOTP"] == "ieee"
    assert ptxas_report.nvfp4_part_launch_kwargs("kda", "nvfp4/int8+sr", {"flush_items_dot": "tf32x3"})[
        "DOTP"] == "tf32x3"
    assert ptxas_report.split_launch_kwargs("gdn", "nvfp4/fp8+sr", 64, "flush")["DOTP"] == "tf32x3"


def _export_tree(dst, src_kernels=None):
    """The parts of this checkout ``tree_compare.py --old`` needs, copied to ``dst`` (``src_kernels``: a replacement
    kernels/rounding.py text)."""
    import shutil

    for d in ("kernels", "quant", "replayssm_quant", "scripts"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(dst, d), ignore=shutil.ignore_patterns("__pycache__"))
    os.makedirs(os.path.join(dst, "eval"))
    shutil.copy(os.path.join(ROOT, "eval", "__init__.py"), os.path.join(dst, "eval"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), dst)
    if src_kernels is not None:
        with open(os.path.join(dst, "kernels", "rounding.py"), "w") as f:
            f.write(src_kernels)


def test_tree_compare_hashes_only(tmp_path):
    """tree_compare.py --no-bench: the hashed runs of both trees and their comparison; an old tree whose stochastic
    rounding draws one random bit fewer differs in the SR spec's stored bits, not in the fp32 spec's."""
    with open(os.path.join(ROOT, "kernels", "rounding.py")) as f:
        src = f.read()
    assert "(r16 << (7 - MB))" in src
    _export_tree(tmp_path / "old", src.replace("(r16 << (7 - MB))", "(r16 << (6 - MB))"))
    out = tmp_path / "out"
    r = _run("tree_compare.py", ["--old", str(tmp_path / "old"), "--out", str(out), "--smoke", "--no-bench",
                                 "--specs", "fp8+sr,fp32"])
    assert r.returncode == 0, r.stderr[-2000:]
    text = (out / "compare.md").read_text()
    assert "3 configurations" in text and "differ" in text
    # the smoke shape's two value heads share one key head: the hashed runs keep one ring key per key head
    assert "gdn fp8+sr replay B=2 HK=1: hp0" in text and "gdn fp32" not in text.split("differ", 1)[1]
    r = _run("tree_compare.py", ["--old", str(tmp_path / "old"), "--out", str(tmp_path / "out_h"), "--smoke",
                                 "--no-bench", "--specs", "fp32", "--keys", "per-head"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "gdn fp32 replay B=2," in (tmp_path / "out_h" / "compare.md").read_text()   # no HK: a key per value head


def test_ptx_same_code_tells_an_unchanged_tree_from_a_changed_one(tmp_path):
    """scripts/ptx_same_code.py: a copy of this checkout compiles to the same code (exit 0); one whose ring decay
    differs does not, in the launches that read the ring (exit 1)."""
    import shutil

    _export_tree(tmp_path / "same")
    shutil.copytree(tmp_path / "same", tmp_path / "changed")
    ring = tmp_path / "changed" / "kernels" / "ring.py"
    src = ring.read_text()
    assert "dec = tl.exp(Gts - Gr)" in src
    ring.write_text(src.replace("dec = tl.exp(Gts - Gr)", "dec = tl.exp(Gts - Gr + 0.5)"))

    def run(old):
        return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ptx_same_code.py"), "--old", str(old),
                               "--families", "gdn", "--specs", "fp32", "--launches", "fused:1,nonflush:256",
                               "--out", str(tmp_path / "same.md")], capture_output=True, text=True, timeout=600)

    r = run(tmp_path / "same")
    assert r.returncode == 0 and "2 of 2 launches compile to the same code" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "| gdn | fp32 | fused | 1 |" in (tmp_path / "same.md").read_text()
    r = run(tmp_path / "changed")
    assert r.returncode == 1 and "0 of 2 launches" in r.stdout, r.stdout + r.stderr[-2000:]


def test_ptxas_report_flush_launch_is_the_h200_plan():
    """scripts/ptxas_report.py --flush records _flush_kernel's keywords from the launcher's own step with the H200
    plan (132 SMs) on a CPU cache: at B = 256 whole-head items of 16-row sub-blocks, 4 warps, the 128-register cap,
    IEEE dots for a single 8-bit spec and 3xTF32 for a dual nvfp4 one, a grid of 4 programs per SM (the warps and grid
    knobs change them); the planner is restored afterwards.
    --nonflush: _nonflush_kernel's, with knobs applied. And sass_loops finds the innermost loops of an nvdisasm
    listing."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import ptxas_report
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    from replayssm_quant.kernels import launch

    on_gpu = launch._on_gpu
    kw = ptxas_report.split_launch_kwargs("gdn", "fp8+sr", 256)
    assert launch._on_gpu is on_gpu
    assert (kw["BVF"], kw["BV"], kw["NVB"], kw["num_warps"], kw["maxnreg"], kw["DOTP"], kw["SR"]) == \
        (16, 128, 1, 4, 128, "ieee", True)
    assert ptxas_report.split_launch_kwargs("gdn", "nvfp4/fp16", 256)["DOTP"] == "tf32x3"
    assert ptxas_report.split_launch_kwargs("gdn", "fp8+sr", 256, "flush", {"flush_dot": "tf32x3"})["DOTP"] == "tf32x3"
    # the persistent grid as launched (4 programs per SM), and as the flush_warps / flush_programs_per_sm knobs set it
    assert kw["_grid"] == (4 * 132,)
    kw2 = ptxas_report.split_launch_kwargs("gdn", "nvfp4/fp16", 256, "flush", {"flush_warps": 2, "maxnreg": 255})
    assert (kw2["num_warps"], kw2["maxnreg"], kw2["_grid"]) == (2, 255, (8 * 132,))
    assert ptxas_report.split_launch_kwargs("gdn", "fp32", 256, "flush", {"flush_programs_per_sm": 5})["_grid"] == (660,)
    # programs one SM holds: registers, shared memory (228 KB, 1 KB reserved per block), 64 warps
    assert ptxas_report.resident_programs(dict(programs_per_sm_by_regs=4, smem_B=43008), 2) == 4
    assert ptxas_report.resident_programs(dict(programs_per_sm_by_regs=8, smem_B=40960), 1) == 5
    assert ptxas_report.resident_programs(dict(programs_per_sm_by_regs=32, smem_B=0), 4) == 16
    nf = ptxas_report.split_launch_kwargs("gdn", "fp8+sr", 256, "nonflush")   # 2 warps, capped, unrolled + prefetch
    assert (nf["num_warps"], nf["maxnreg"], nf["STAGES"], nf["PREFETCH"], nf["BVA"]) == (2, 128, 0, True, 128)
    assert ptxas_report.split_launch_kwargs("gdn", "fp8+sr", 256, "nonflush", {"nonflush_stages": 3})["STAGES"] == 3
    # the nvfp4 pass-1 items' launch with its own warps (knob flush_items_warps: 2 warps, uncapped)
    pa = ptxas_report.split_launch_kwargs("gdn", "nvfp4/fp16", 64, "part", {"flush_items_warps": 2})
    assert (pa["num_warps"], pa["maxnreg"]) == (2, None)
    assert ptxas_report.split_launch_kwargs("kda", "nvfp4/fp16", 64, "part")["maxnreg"] == 128
    # --fused: the fused step's kernel at batch 1 (gdn uncapped; mamba2's 512-program grid capped at 128), and only
    # where the plan fuses
    fu = ptxas_report.split_launch_kwargs("gdn", "fp32", 1, "fused")
    assert fu["maxnreg"] is None and fu["_grid"][-1] == 1 and fu["HV"] == 32
    # with the counters' advance in the launch, as SSMStateCache.step runs it (the knob off: none)
    assert fu["arr_ptr"] is not None
    assert ptxas_report.split_launch_kwargs("gdn", "fp32", 1, "fused", {"step_advance": False})["arr_ptr"] is None
    assert ptxas_report.split_launch_kwargs("mamba2", "fp32", 1, "fused", {"maxnreg": 0})["maxnreg"] is None
    assert ptxas_report.split_launch_kwargs("mamba2", "fp32", 1, "fused")["maxnreg"] == 128
    with pytest.raises(SystemExit, match="is a split step"):
        ptxas_report.split_launch_kwargs("gdn", "fp32", 256, "fused")
    with pytest.raises(SystemExit, match="is a fused step"):
        ptxas_report.split_launch_kwargs("gdn", "fp32", 1, "nonflush")
    # the offline compile specializes launch arguments as the JIT does (else unaligned pointers: other code)
    assert ptxas_report.jit_specialization(1) == ("constexpr", False)
    assert ptxas_report.jit_specialization(32) == ("i32", True) and ptxas_report.jit_specialization(7) == ("i32", False)
    t = torch.zeros(64)
    assert ptxas_report.jit_specialization(t) == ("*fp32", True) and ptxas_report.jit_specialization(t[1:])[1] is False
    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   FFMA R2, R2, R3, R4 ;
.L_x_1:
        /*0020*/                   SHFL.BFLY PT, R5, R2, 0x1, 0x1f ;
        /*0030*/              @P0  BRA `(.L_x_1) ;
        /*0040*/                   LDG.E R6, desc[UR4][R2.64] ;
        /*0050*/              @!P1 BRA `(.L_x_0) ;
.L_x_2:
        /*0060*/                   BRA `(.L_x_2);
"""
    assert ptxas_report.sass_loops(listing) == [["SHFL", "BRA"], ["BRA"]]


_PTX_PROBE = """
import sys
sys.path.insert(0, "scripts")
import ptxas_report
from replayssm_quant.kernels import flush, nonflush

def ptx(kernel, family, spec, knobs):
    kw = ptxas_report.split_launch_kwargs(family, spec, 256, kernel, knobs)
    fn = dict(flush=flush._flush_kernel, nonflush=nonflush._nonflush_kernel)[kernel]
    return kw, ptxas_report.compile_launch(fn, kw, ptx=True)[1]["ptx"]
"""


def _ptx_probe(lines: str) -> list[str]:
    """The printed lines of ``lines`` run after :data:`_PTX_PROBE` in a subprocess without the interpreter, where
    ``ptx(kernel, family, spec, knobs)`` gives the split step's ``kernel`` launch at B = 256 as planned on an H200
    (its keywords, its PTX compiled for sm_90a on the CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _PTX_PROBE + lines], capture_output=True, text=True, cwd=ROOT,
                       timeout=600, env=dict(env, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.split("\n")


def test_flush_scratch_l2_hints_reach_the_compiled_code():
    """Knob ``flush_scratch_l2``: the flush launch of a dual nvfp4 step at B = 256 (the H200 plan), compiled for sm_90a
    on the CPU (no interpreter), stores its S_L scratch with an L2 evict_last policy and reloads it with evict_first;
    without the knob the kernel carries no L2 policy."""
    out = _ptx_probe("""
for knobs in ({"flush_scratch_l2": True}, {}):
    kw, p = ptx("flush", "gdn", "nvfp4/fp16", knobs)
    print(kw["SCR_L2"], "L2::evict_last" in p, "L2::evict_first" in p, p.count("L2::cache_hint") > 0)
""")
    assert out[:2] == ["True True True True", "False False False False"], out


def test_nonflush_e2m1_decode_reaches_the_compiled_code():
    """Knob ``nonflush_e2m1_ptx``: the non-flush launch of an nvfp4 read at B = 256 (the H200 plan), compiled for
    sm_90a on the CPU, decodes E2M1 through the inline-PTX E4M3 image for gdn, by integer operations for mamba2 (none
    of that inline PTX in its code; its block scales still take the E4M3 cvt), and through the PTX again when the
    knob asks for it."""
    out = _ptx_probe("""
for family, knobs in (("gdn", {}), ("mamba2", {}), ("mamba2", {"nonflush_e2m1_ptx": True})):
    kw, p = ptx("nonflush", family, "nvfp4/fp16", knobs)
    print(kw["E2M1_PTX"], "0x1C1C1C1C" in p)   # the E2M1 -> E4M3 bit move of rounding._E2M1_E4M3_ASM
""")
    assert out[:3] == ["True True", "False False", "True True"], out


def test_fused_nvfp4_flush_compiles_for_the_gpu_with_one_and_several_sub_blocks():
    """The fused step's nvfp4 head program compiles for sm_90a on the CPU (no interpreter, which only runs the
    branches a launch takes) with several flush sub-blocks (the two-pass flush through its S_L scratch, which the
    launch allocates: ``scr_ptr`` given) and with one (``flush_block_v`` = V: the one-pass flush, no scratch; its
    kernel must not compile the two-pass branch, whose scratch check would fail the compile: s20b), and spread over
    the head's programs (the default, knob ``fused_nvfp4_spread``: an acquire-release arrival, the other
    programs' rows read past L1)."""
    out = _ptx_probe("""
import replayssm_quant.kernels.fused as fused
for knobs in ({"fused_nvfp4_spread": False}, {"block_v": 128, "flush_block_v": 128}, {}):
    kw = ptxas_report.split_launch_kwargs("gdn", "nvfp4/fp16", 1, "fused", knobs)
    p = ptxas_report.compile_launch(fused._decode_step_kernel, kw, ptx=True)[1]["ptx"]
    print(kw["NVF"], kw["scr_ptr"] is not None, kw["SPREAD"], ".entry" in p, "acq_rel.add" in p and "ld.global.cg" in p)
""")
    assert out[:3] == ["8 True False True False", "1 False False True False", "8 True True True True"], out


def test_step_inputs_are_loaded_before_the_first_barrier():
    """The batch-1 fused step (fp32, the H200 plan) and the split step's non-flush launch (nvfp4/fp16, B = 256),
    compiled for sm_90a on the CPU, issue the step inputs' loads before their first block barrier: Triton converts a
    bf16 input's layout through shared memory at its cast, and a load placed after that barrier starts only once the
    input has arrived (before 2026-12-07f the fused step loaded q, then k after q's barrier, then the state: three
    memory round trips in a row, 4 global loads before the first barrier). The fused program's loads then include
    the read copy's tile and the ring (22 or more), the non-flush launch's at least the index, q, k, g and (gdn) beta."""
    out = _ptx_probe("""
import re
import replayssm_quant.kernels.fused as fused
def loads_before_barrier(p):
    return len(re.findall(r"ld\\.global", p[:p.index("bar.sync")]))
for family in ("gdn", "mamba2"):
    kw = ptxas_report.split_launch_kwargs(family, "fp32", 1, "fused")
    print(loads_before_barrier(ptxas_report.compile_launch(fused._decode_step_kernel, kw, ptx=True)[1]["ptx"]))
print(loads_before_barrier(ptx("nonflush", "gdn", "nvfp4/fp16", {})[1]))
""")
    fused_gdn, fused_mamba2, nonflush_gdn = map(int, out[:3])
    assert fused_gdn >= 22 and fused_mamba2 >= 22 and nonflush_gdn >= 5, out


def test_gpu_scripts_check_their_arguments_before_the_device():
    """launch_sweep.py and knob_identity_check.py name a bad family, spec or knob (kernels.bench.check_grid,
    parse_knobs, LaunchKnobs) before they look for a GPU or compile anything."""
    for script, args, said in (("launch_sweep.py", ["--out", "/nonexistent/x", "--families", "gdn,foo"],
                                "launch_sweep: families ['foo']: allowed gdn, mamba2, kda"),
                               ("launch_sweep.py", ["--out", "/nonexistent/x", "--specs", "fp33"], "unknown format"),
                               ("knob_identity_check.py", ["--variants", "default;block_v=3"],
                                "knob_identity_check: block_v=3: a power of two"),
                               ("knob_identity_check.py", ["--families", "rwkv"], "families ['rwkv']")):
        r = _run(script, args)
        assert r.returncode == 1 and said in r.stderr, (script, args, r.stderr[-500:])


def test_launch_floor_and_fla_anchor_usage_errors(tmp_path):
    """launch_floor.py refuses a window or repetition time below 1 (a window of 0 ran an empty graph);
    ncu_fla_anchor.py names a family without an fla anchor and, with none here, the missing GPU."""
    for script, args, said in (("launch_floor.py", ["--cpu-smoke", "--window", "0", "--out", str(tmp_path)],
                                "--window 0 and --rep-ms 40: both must be >= 1"),
                               ("ncu_fla_anchor.py", ["--family", "mamba2"], "fla anchors exist for gdn, kda"),
                               ("ncu_fla_anchor.py", ["--batch", "0"], "--batch and --window must be >= 1"),
                               ("ncu_fla_anchor.py", [], "needs a CUDA GPU")):
        r = _run(script, args)
        assert r.returncode == 2 and said in r.stderr, (script, args, r.stderr[-500:])
    assert not os.listdir(tmp_path)


def test_ptxas_report_bad_arguments_are_usage_errors():
    """scripts/ptxas_report.py refuses a bad family, spec, knob, number, dot precision or two kernels at once with a
    usage line before it compiles anything."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    for args, said in ((["--families", "foo"], "families ['foo']"), (["--knobs", "blockv=32"], "bad knob 'blockv=32'"),
                       (["--block-v", "x"], "--block-v 'x': a comma list of integers"),
                       (["--flush", "--dots", "tf32"], "--dots 'tf32': allowed ieee, tf32x3, plan"),
                       (["--warps", "3"], "verify_warps=3: a power of two"),
                       (["--flush", "--nonflush"], "one at a time")):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "ptxas_report.py"), *args],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert r.returncode == 2 and said in r.stderr, (args, r.stderr[-500:])
