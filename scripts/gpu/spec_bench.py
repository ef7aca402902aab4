"""Speculative-decoding benchmark (Algorithm 2, issue 27): verify cost and SSM-layer tokens/s, one device call.

Exact command (repository root, on the H200; at most ~5 min: batch 256 is timed first and no new measurement starts
after --budget-s, default 270 s; --resume into the same folder adds what was left):

    source scripts/gpu/setup.sh && python3 scripts/gpu/spec_bench.py --out $OUT/spec_bench

Times replay verify(T) + commit for T = 2, 4, 8 (averaged over whole windows, flushes included) against one
standard replay step and one conventional step, the conventional snapshot baseline beside it, at batch 1, 64, 256,
512, specs fp32 and nvfp4/fp16, all three families, and the SSM-layer tokens/s at 50/75/100% acceptance
(kernels/spec_bench.py has the definitions). Writes results.csv (incrementally: results.partial.csv, --resume),
summary.csv, correctness.csv and report.md under --out. CPU check: ``TRITON_INTERPRET=1 python3
scripts/gpu/spec_bench.py --cpu-smoke --families gdn --out /tmp/sb``.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root


def _list(kind):
    def parse(text):
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}s, got {text!r}")
    return parse


def main(argv=None):
    p = argparse.ArgumentParser(prog="scripts/gpu/spec_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--families", type=_list(str), default=None, help="comma-separated (default: mamba2,gdn,kda)")
    p.add_argument("--specs", type=_list(str), default=None, help="comma-separated (default: fp32,nvfp4/fp16)")
    p.add_argument("--batches", type=_list(int), default=None, help="comma-separated (default: 1,64,256,512)")
    p.add_argument("--drafts", type=_list(int), default=None, help="verify lengths T (default: 2,4,8)")
    p.add_argument("--rates", type=_list(float), default=None, help="acceptance rates (default: 0.5,0.75,1)")
    p.add_argument("--window", type=int, default=None, help="replay window L (default 16)")
    p.add_argument("--rep-ms", type=int, default=40, help="do_bench time per measurement")
    p.add_argument("--resume", action="store_true", help="keep the rows of an interrupted run in --out")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no new measurement after this many seconds (default 270 on the GPU)")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes in the Triton interpreter")
    p.add_argument("--sweep-verify", action="store_true",
                   help="only time the replay verify alone (B=256, T=8) over V-block sizes 16/32/64 x warps 4/8/16 "
                        "(writes OUT/verify_sweep.csv); --families and --specs apply")
    p.add_argument("--sweep-block-v", type=_list(int), default=[16, 32, 64], help="--sweep-verify: V-block sizes")
    p.add_argument("--sweep-warps", type=_list(int), default=[4, 8, 16], help="--sweep-verify: warps per program")
    p.add_argument("--sweep-dots", type=_list(str), default=["ieee"],
                   help="--sweep-verify: dot precisions (ieee, tf32x3)")
    p.add_argument("--sweep-split", type=_list(int), default=[1],
                   help="--sweep-verify: programs per (row, head) over its V-blocks (verify_split)")
    p.add_argument("--keys", choices=("shared", "per-head"), default="shared",
                   help="the caches' keys: one per key head of the shape, as the models have them (default), or one "
                        "per value head")
    p.add_argument("--verify-config", default=None,
                   help="a --sweep-verify CSV: the replay caches of each family use its fastest config within 1e-5 "
                        "of the oracle")
    args = p.parse_args(argv)
    try:
        from replayssm_quant.kernels.spec_bench import run_spec_bench, sweep_knobs, verify_tile_sweep
    except ImportError:
        sys.exit("replayssm_quant is not importable: run `source scripts/gpu/setup.sh` from the repository root first")
    try:
        if args.sweep_verify:
            df = verify_tile_sweep(args.out, families=tuple(args.families or ("mamba2", "gdn", "kda")),
                                   specs=tuple(args.specs or ("fp32",)), block_vs=tuple(args.sweep_block_v),
                                   warps=tuple(args.sweep_warps), dots=tuple(args.sweep_dots),
                                   splits=tuple(args.sweep_split), cpu_smoke=args.cpu_smoke,
                                   shared_keys=args.keys == "shared")
            print(df.to_string(index=False))
            return 0
        run_spec_bench(args.out, families=args.families, specs=args.specs, batches=args.batches,
                       drafts=args.drafts, rates=args.rates, window=args.window, rep_ms=args.rep_ms,
                       cpu_smoke=args.cpu_smoke, resume=args.resume, budget_s=args.budget_s,
                       knobs=sweep_knobs(args.verify_config) if args.verify_config else None,
                       shared_keys=args.keys == "shared")
    except (ValueError, FileNotFoundError) as e:   # bad options, a missing --verify-config file, no GPU
        print(f"spec_bench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
