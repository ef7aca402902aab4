"""``replayssm-quant state-stats``: how well each format represents a model's SSM states."""

HELP = "cast error of every format on a model's real (prefilled) SSM states, per layer"


def configure(parser):
    parser.add_argument("--model", default=None,
                        help="an embedded model (default: gdn-long), a tiny-ARCH, a folder or hub id")
    parser.add_argument("--data", default=None,
                        help="text data, as eval's --data (default: sampled, the text shipped with the package)")
    parser.add_argument("--prefill", type=int, default=1024, help="tokens prefilled per document (default 1024)")
    parser.add_argument("--docs", type=int, default=4, help="documents (default 4)")
    parser.add_argument("--out", default=None, help="write the markdown table to this file")


def run(args):
    import torch

    from replayssm_quant.eval.adapters.loading import DEFAULT_MODEL, load_model
    from replayssm_quant.eval.data import load_documents
    from replayssm_quant.eval.state_stats import markdown, prefill_states, state_format_table, summary

    from pathlib import Path

    from replayssm_quant.eval.data import data_name, describe

    for name, v in (("--prefill", args.prefill), ("--docs", args.docs)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    out = Path(args.out) if args.out else None
    if out is not None:                           # before the work: a bad path fails at once
        if out.is_dir():
            raise ValueError(f"--out {out} is a folder; pass a file path for the markdown table")
        out.parent.mkdir(parents=True, exist_ok=True)
    lm = load_model(args.model)
    docs = load_documents(args.data, lm.tokenizer, args.prefill, args.docs)
    ids = torch.stack([d.tokens for d in docs])
    table = state_format_table(prefill_states(lm.model, ids))
    text = (f"# SSM state vs storage formats: {lm.name}\n\n"
            f"Command: `replayssm-quant state-stats --model {args.model or DEFAULT_MODEL} --data "
            f"{data_name(args.data)} --prefill {args.prefill} --docs {len(docs)}`. Data: {describe(args.data)}. States "
            f"after an fp32 prefill of {len(docs)} documents of {args.prefill} tokens; one round-to-nearest-even "
            "cast each. fp8 / int8: one fp32 scale per state row (amax / 448, amax / 127); e4m3 / e5m2: raw "
            "casts, no scale. \"frac rounded to zero\": of the nonzero elements.\n\n"
            "## Mean over layers\n\n" + markdown(summary(table), floatfmt=".3g") +
            "\n\n## Per layer\n\n" + markdown(table, index=False, floatfmt=".3g") + "\n")
    print(text)
    if out is not None:
        out.write_text(text)
    return 0
