"""Run the decode-kernel benchmark on the GPU: ``python3 scripts/gpu/bench.py --out $OUT``.

Does everything in one go (correctness vs the float64 oracle, copy bandwidth,
all families x specs x modes x batches, fla anchor when importable) and writes
results.csv, memory.csv, correctness.csv, report.md and bench.png under --out.
Options as ``replayssm-quant bench`` (``--help``), e.g. ``--split-flush auto|on|off`` (replay step as two
launches, non-flush rows then flush rows; ``--sweep-block-v`` times fused and split).
Run `source scripts/gpu/setup.sh` first on a machine without the package installed.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
try:
    from replayssm_quant.cli import interrupted_message
    from replayssm_quant.commands import bench
except ImportError:
    sys.exit("replayssm_quant is not importable: run `source scripts/gpu/setup.sh` from the repository root first")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="scripts/gpu/bench.py", description=bench.HELP)
    bench.configure(parser)
    args = parser.parse_args(argv)
    try:
        return bench.run(args)
    except ValueError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted_message("python3 scripts/gpu/bench.py", argv, getattr(bench, "RESUMABLE", False),
                                  getattr(bench, "RESUME_FLAG", None)), file=sys.stderr)
        return 130


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
