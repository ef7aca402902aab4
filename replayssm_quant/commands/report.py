"""``replayssm-quant report DIR``: regenerate the KL report of a results folder."""

HELP = "regenerate the KL report (markdown, CSV, PNG plots) of a `replayssm-quant eval` results folder"


def configure(parser):
    parser.add_argument("dir", help="results folder written by `replayssm-quant eval --out DIR`")


def run(args):
    from replayssm_quant.eval.report import build_report

    print(f"report: {build_report(args.dir)}")
    return 0
