"""``replayssm-quant report DIR``: regenerate the KL report of a results folder."""

HELP = "regenerate the KL report (markdown, CSV, PNG plots) of a `replayssm-quant eval` results folder"


def configure(parser):
    parser.add_argument("dir", help="results folder written by `replayssm-quant eval --out DIR` (its records/, or "
                                    "the CSVs of an earlier report)")
    parser.add_argument("--out", default=None,
                        help="write the report into this folder instead of DIR (e.g. when DIR is read-only)")
    parser.add_argument("--per-position", action="store_true",
                        help="also draw the per-position mean KL (faint lines) in kl_vs_position.png")


def run(args):
    from replayssm_quant.eval.report import build_report

    print(f"report: {build_report(args.dir, out=args.out, per_position=args.per_position)}")
    return 0
