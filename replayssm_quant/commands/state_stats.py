"""``replayssm-quant state-stats``: how well each format represents a model's SSM states."""

HELP = "cast error of every format on a model's real (prefilled) SSM states, per layer"


def configure(parser):
    parser.add_argument("--model", default=None,
                        help="an embedded model (default: gdn-long), a tiny-ARCH, a folder or hub id")
    parser.add_argument("--data", default=None, help="text data (default: the embedded held-out books)")
    parser.add_argument("--prefill", type=int, default=1024, help="tokens prefilled per document (default 1024)")
    parser.add_argument("--docs", type=int, default=4, help="documents (default 4)")
    parser.add_argument("--out", default=None, help="write the markdown table to this file")


def run(args):
    import torch

    from replayssm_quant.eval.adapters.loading import DEFAULT_MODEL, load_model
    from replayssm_quant.eval.data import load_documents
    from replayssm_quant.eval.state_stats import markdown, prefill_states, state_format_table, summary

    lm = load_model(args.model)
    docs = load_documents(args.data, lm.tokenizer, args.prefill, args.docs)
    ids = torch.stack([d.tokens for d in docs])
    table = state_format_table(prefill_states(lm.model, ids))
    text = (f"# SSM state vs storage formats: {lm.name}\n\n"
            f"Command: `replayssm-quant state-stats --model {args.model or DEFAULT_MODEL} --prefill {args.prefill} "
            f"--docs {len(docs)}`. States after an fp32 prefill of {len(docs)} held-out documents of "
            f"{args.prefill} tokens; one round-to-nearest-even cast each. fp8 / int8: one fp32 scale per state "
            "row (amax / 448, amax / 127); e4m3 / e5m2: raw casts, no scale. \"frac rounded to zero\": of the "
            "nonzero elements.\n\n"
            "## Mean over layers\n\n" + markdown(summary(table), floatfmt=".3g") +
            "\n\n## Per layer\n\n" + markdown(table, index=False, floatfmt=".3g") + "\n")
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0
