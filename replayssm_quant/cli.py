"""The ``replayssm-quant`` console script.

Each subcommand lives in its own module under :mod:`replayssm_quant.commands`
exposing ``HELP`` (one line), ``configure(parser)`` and ``run(args) -> int``.
Modules keep heavy imports (torch, transformers) inside ``run`` so ``--help``
stays fast. Errors meant for the user are raised as :class:`UsageError` or
``ValueError`` and printed as one line with exit status 2. A module with
``RESUMABLE = True`` gets, on Ctrl-C, the exact command that resumes it; one with ``RESUME_FLAG`` (an option
that makes a rerun resume) the command with that option.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys

#: subcommand name -> module under replayssm_quant.commands
COMMANDS = {
    "formats": "formats",
    "spec": "spec",
    "bench": "bench",
    "train-demo": "train_demo",
    "eval": "eval_kl",
    "report": "report",
    "downstream": "downstream",
    "state-stats": "state_stats",
    "generate": "generate",
    "spec-report": "spec_report",
}


class UsageError(Exception):
    """A user mistake: printed as one line, exit status 2."""


def default_states(states: list[str], mode: str) -> list[str]:
    """A command's default state list under ``--mode``: ``states``, less (conventional) the separate READ/RECUR
    specs without a mode of their own, which only the replay mode has (a note on stderr says what runs)."""
    from replayssm_quant.quant.spec import parse_state_spec

    kept = [t for t in states if mode != "conventional" or ":" in t or parse_state_spec(t).shared]
    if len(kept) < len(states):
        print(f"--mode {mode}: the default states less the separate READ/RECUR specs (replay only): "
              + " ".join(kept), file=sys.stderr)
    return kept


def device_arg(device: str | None) -> str:
    """A command's ``--device`` value checked (:func:`replayssm_quant.eval.placement.resolve_device`; a one-line
    :class:`UsageError`); None: cuda when a GPU is visible, else cpu."""
    from replayssm_quant.eval.placement import resolve_device

    try:
        return resolve_device(device)
    except ValueError as e:
        raise UsageError(f"--device {device}: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="replayssm-quant",
        description="Low-precision recurrent state for SSM decoding (ReplaySSM).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod_name in COMMANDS.items():
        try:
            mod = importlib.import_module(f"replayssm_quant.commands.{mod_name}")
        except ModuleNotFoundError as e:
            if e.name == f"replayssm_quant.commands.{mod_name}":
                continue  # command not built yet
            raise
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.configure(p)
        p.set_defaults(_run=mod.run, _resumable=getattr(mod, "RESUMABLE", False),
                       _resume_flag=getattr(mod, "RESUME_FLAG", None))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (UsageError, ValueError, FileNotFoundError) as e:
        print(f"replayssm-quant {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted_message("replayssm-quant", argv, args._resumable, args._resume_flag), file=sys.stderr)
        return 130


def interrupted_message(prog: str, argv: list[str], resumable: bool, flag: str | None) -> str:
    """What an interrupted (Ctrl-C) run of ``prog argv`` prints: how to resume it, for commands that keep finished
    work (``resumable``: a rerun resumes; ``flag``: the option that resumes). ``prog`` is written as given."""
    quoted = [shlex.quote(a) for a in argv]
    if resumable or (flag and flag in argv):
        return "interrupted; finished work is kept: rerun the same command to resume: " + " ".join([prog, *quoted])
    if flag:
        return f"interrupted; finished work is kept: rerun with {flag} to resume: " + " ".join([prog, *quoted, flag])
    return "interrupted"


if __name__ == "__main__":  # pragma: no cover
    # `python -m replayssm_quant.cli`: run the package's module, whose UsageError the commands raise (this file,
    # run as __main__, is a second module with a second UsageError class)
    from replayssm_quant.cli import main as _main

    sys.exit(_main())
