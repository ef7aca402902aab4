"""``replayssm-quant bench``: decode-kernel benchmark on the GPU (DESIGN.md sec. 7)."""

import os

HELP = "benchmark the decode kernels on a GPU (time per step, bandwidth, speedups, memory per slot)"

#: ``cli`` prints, on Ctrl-C, the command with this option (it keeps the rows already measured)
RESUME_FLAG = "--resume"


def _csv(kind):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise ValueError(f"empty --{kind} list")
        return items
    return parse


def configure(parser):
    parser.add_argument("--out", default="reports/bench", help="output folder (default reports/bench)")
    parser.add_argument("--families", type=_csv("families"), default=None,
                        help="comma list of mamba2,gdn,kda (default all)")
    parser.add_argument("--specs", type=_csv("specs"), default=None,
                        help="comma list of state specs (default fp32,fp16,fp8+sr,int8+sr,nvfp4+sr,nvfp4/fp16,nvfp4/fp8+sr,nvfp4/int8+sr)")
    parser.add_argument("--batches", type=_csv("batches"), default=None,
                        help="comma list of batch sizes (default 1,16,64,256,512)")
    parser.add_argument("--window", type=int, default=None, help="replay window L (default 16; --cpu-smoke 4)")
    parser.add_argument("--rep-ms", type=int, default=40, help="do_bench rep time per measurement, ms (default 40)")
    parser.add_argument("--block-v", type=int, default=None, help="force the kernel's V block (default: heuristic)")
    parser.add_argument("--flush-block-v", type=int, default=None,
                        help="force the rows per flush sub-block (power of two; default 16 replay, 32 conventional)")
    parser.add_argument("--maxnreg", type=int, default=None,
                        help="register cap per thread of the kernel (0 = none; default: 128 for replay on the GPU)")
    parser.add_argument("--sweep-block-v", type=_csv("sweep-block-v"), default=None,
                        help="also time gdn replay fp32 and nvfp4/fp16 at the largest batch for these V-block sizes "
                             "x the --sweep-maxnreg caps (sweep.csv, report.md, stdout)")
    parser.add_argument("--sweep-maxnreg", type=_csv("sweep-maxnreg"), default=["128", "0"],
                        help="register caps of the tile sweep (0 = none; default 128,0)")
    parser.add_argument("--split-flush", choices=("auto", "on", "off"), default="auto",
                        help="replay step as separate launches, non-flush rows then flush rows (on), one fused kernel "
                             "(off), or the launcher's heuristic: split large GPU grids (auto, default); the tile "
                             "sweep times both")
    parser.add_argument("--resume", action="store_true",
                        help="keep the measurements already in --out (a run cut short: results.partial.csv; else a "
                             "finished run: results.csv, and the device checks of the families not run now) and "
                             "time only the missing configurations (e.g. add --families to a finished folder)")
    parser.add_argument("--ring-dtype", choices=("float32", "bfloat16"), default="float32",
                        help="dtype in which the replay rings keep k and v (SSMStateCache ring_dtype; bfloat16 holds "
                             "the benchmark's bf16 activations exactly in half the ring bytes; default float32)")
    parser.add_argument("--keys", choices=("shared", "per-head"), default="shared",
                        help="where the model's value heads share keys (gdn: 16 key heads for 32 value heads; mamba2: "
                             "8 groups for 128 heads), the caches keep one key per key head (shared, the default) or "
                             "one per value head (per-head)")
    parser.add_argument("--mamba-ssm-src", default=None,
                        help="folder holding mamba_ssm/ (an unpacked mamba_ssm sdist) whose Triton "
                             "selective_state_update times the mamba2 anchor rows (default $REPLAYSSM_MAMBA_SSM_SRC, "
                             "else an installed mamba_ssm; neither: no anchor rows)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny shapes in the Triton CPU interpreter, to check the pipeline (times are meaningless); "
                             "default specs fp32,nvfp4/fp16, batches 1,2, window 4 (a few minutes)")


def _ints(option: str, values) -> list[int] | None:
    """``values`` (strings) as integers; None when the option was not given."""
    if not values:
        return None
    try:
        return [int(v) for v in values]
    except ValueError:
        raise ValueError(f"{option} must be integers, got {','.join(values)}") from None


def run(args):
    import sys

    from replayssm_quant.kernels.bench import run_bench

    batches = _ints("--batches", args.batches)
    if batches is not None and min(batches) < 1:
        raise ValueError("--batches must be positive")
    for name in ("block_v", "flush_block_v"):
        x = getattr(args, name)
        if x is not None and (x < 1 or x & (x - 1)):
            raise ValueError(f"--{name.replace('_', '-')} must be a power of two, got {x}")
    sweep = _ints("--sweep-block-v", args.sweep_block_v)
    if sweep is not None and any(x < 16 or x & (x - 1) for x in sweep):
        raise ValueError(f"--sweep-block-v sizes must be powers of two >= 16, got {sweep}")
    sweep_mr = _ints("--sweep-maxnreg", args.sweep_maxnreg) or []
    for x in [args.maxnreg] + sweep_mr:
        if x is not None and x != 0 and not 24 <= x <= 255:
            raise ValueError(f"--maxnreg/--sweep-maxnreg must be 0 (no cap) or in 24..255, got {x}")
    if args.window is not None and args.window < 1:
        raise ValueError(f"--window must be >= 1, got {args.window}")
    if args.rep_ms <= 0:
        raise ValueError(f"--rep-ms must be positive (ms of timing per measurement), got {args.rep_ms}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out} is a file, not a folder")
    src = getattr(args, "mamba_ssm_src", None)
    if src and not os.path.isdir(os.path.join(src, "mamba_ssm")):
        raise ValueError(f"--mamba-ssm-src {src}: no mamba_ssm/ folder there (an unpacked mamba_ssm sdist)")
    df = run_bench(args.out, families=args.families, specs=args.specs, batches=batches, window=args.window,
                   rep_ms=args.rep_ms, cpu_smoke=args.cpu_smoke, block_v=args.block_v,
                   flush_block_v=args.flush_block_v, maxnreg=args.maxnreg, sweep_block_v=sweep,
                   sweep_maxnreg=sweep_mr,
                   split_flush={"auto": None, "on": True, "off": False}[getattr(args, "split_flush", "auto")],
                   resume=getattr(args, "resume", False), ring_dtype=getattr(args, "ring_dtype", "float32"),
                   mamba_ssm_src=getattr(args, "mamba_ssm_src", None),
                   shared_keys=getattr(args, "keys", "shared") == "shared",
                   command="replayssm-quant bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"]
                   else " ".join(sys.argv))
    print(f"wrote {args.out}/results.csv, report.md, bench.png ({len(df)} measurements)")
    return 0
