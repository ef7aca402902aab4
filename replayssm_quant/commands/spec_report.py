"""``replayssm-quant spec-report``: acceptance rate and tokens per model step of prompt-lookup speculation."""

HELP = ("speculative decoding report: acceptance rate and tokens per model step of ngram:T drafts on the packaged "
        "copy tasks, with a token-for-token check against plain greedy decoding")
RESUMABLE = True


def configure(parser):
    from replayssm_quant.eval.spec_report import SPEC_TASKS, SpecReportSettings

    d = SpecReportSettings()
    parser.add_argument("--model", nargs="+", default=list(d.models), metavar="MODEL",
                        help="models (default: " + " ".join(d.models) + ")")
    parser.add_argument("--tasks", nargs="+", default=list(d.tasks), choices=SPEC_TASKS,
                        help="packaged tasks (default: copy upper)")
    parser.add_argument("--state", nargs="+", default=list(d.variants), metavar="[MODE:]SPEC",
                        help="state variants (default fp32)")
    parser.add_argument("--drafts", nargs="+", type=int, default=list(d.drafts), metavar="T",
                        help="tokens per verify step of each ngram:T run (default 2 4 8)")
    parser.add_argument("--max-ngram", type=int, default=d.max_ngram,
                        help=f"longest n-gram matched, ngram:T:N (default {d.max_ngram})")
    parser.add_argument("--docs", type=int, default=d.docs, help=f"documents per task (default {d.docs})")
    parser.add_argument("--max-len", type=int, default=d.max_len,
                        help=f"only documents whose target has <= this many tokens (default {d.max_len})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help=f"rows per batch (default {d.batch_size})")
    parser.add_argument("--window", type=int, default=d.window, help=f"replay window L (default {d.window})")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--backend", default=None, choices=["triton", "torch"],
                        help="state-cache kernels (default: triton on CUDA, torch on CPU)")
    parser.add_argument("--out", default="reports/spec", help="report folder (default reports/spec); a rerun "
                        "into it skips finished runs")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the report from --out")


def run(args):
    from pathlib import Path

    from replayssm_quant.eval.decode import parse_variant
    from replayssm_quant.eval.drafting import parse_draft
    from replayssm_quant.cli import device_arg
    from replayssm_quant.eval.spec_report import SpecReportSettings, run_spec_report, write_spec_report

    out = Path(args.out)
    if args.report_only:
        print(f"report: {write_spec_report(out)}")
        return 0
    for name, v in (("--docs", args.docs), ("--max-len", args.max_len), ("--batch-size", args.batch_size),
                    ("--window", args.window)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if args.device is not None:
        device_arg(args.device)                 # a bad or absent device: one line before anything loads
    for T in args.drafts:                       # a bad T or N: the drafter's one-line error
        parse_draft(f"ngram:{T}:{args.max_ngram}")
    for v in args.state:
        parse_variant(v)
    st = SpecReportSettings(models=tuple(args.model), tasks=tuple(args.tasks), variants=tuple(args.state),
                            drafts=tuple(args.drafts), max_ngram=args.max_ngram, docs=args.docs, max_len=args.max_len,
                            batch_size=args.batch_size, window=args.window, device=args.device, backend=args.backend)
    print(f"report: {run_spec_report(out, st)}")
    return 0
