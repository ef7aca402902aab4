"""``replayssm-quant generate``: greedy generation through the state cache, optionally speculative."""

HELP = "greedy generation through the SSM state cache; --draft ngram:T decodes speculatively (prompt lookup)"


def configure(parser):
    parser.add_argument("--model", default="gdn-demo",
                        help="gdn-demo (default: it learned the packaged tasks), mamba2-demo, tiny-ARCH, a folder or "
                             "hub id")
    parser.add_argument("--prompt", nargs="+", action="extend", default=None, metavar="TEXT",
                        help="prompts (repeatable; '\\n' is a newline); default: --task's packaged documents")
    parser.add_argument("--task", default="copy", choices=["copy", "upper"],
                        help="packaged task whose prompts to use without --prompt (default copy)")
    parser.add_argument("--docs", type=int, default=2, help="packaged documents without --prompt (default 2)")
    parser.add_argument("--state", default="fp32", metavar="[MODE[@L]:]SPEC", help="state variant (default fp32)")
    parser.add_argument("--draft", default=None, metavar="ngram:T[:N]",
                        help="speculative decoding: verify T tokens per model step (the last accepted + up to T-1 "
                             "drafts from n-gram matching in the prompt and the text so far, the longest n-gram of "
                             "N down to 1 tokens; default N 3); default none")
    parser.add_argument("--check", action="store_true",
                        help="with --draft: also run plain greedy decoding and report whether the tokens match")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per prompt at most (default 64)")
    parser.add_argument("--window", type=int, default=16, help="replay window L (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="stochastic-rounding seed (default 0)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--backend", default=None, choices=["triton", "torch"],
                        help="state-cache kernels (default: triton on CUDA, torch on CPU)")


def run(args):
    import time

    import torch
    from tqdm import tqdm

    from replayssm_quant.cli import device_arg
    from replayssm_quant.eval.adapters.loading import check_model_name, load_model
    from replayssm_quant.eval.decode import DecodeSession, parse_variant
    from replayssm_quant.eval.drafting import parse_draft
    from replayssm_quant.eval.spec_report import EOS, NEWLINE, load_task_docs

    draft = parse_draft(args.draft)               # bad values: one line before anything loads
    parse_variant(args.state)
    check_model_name(args.model)
    for name, v in (("--max-new-tokens", args.max_new_tokens), ("--docs", args.docs), ("--window", args.window)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if args.check and draft is None:
        raise ValueError("--check compares a speculative run with plain decoding: it needs --draft ngram:T")
    device = device_arg(args.device)
    lm = load_model(args.model, device=device, dtype="float32")
    prompts = [p.replace("\\n", "\n") for p in args.prompt] if args.prompt else \
        [d["prompt"] for d in load_task_docs(args.task, args.docs, 10 ** 9)]
    if not args.prompt and len(prompts) < args.docs:
        import sys

        print(f"note: the {args.task} task has {len(prompts)} packaged documents (asked for {args.docs})",
              file=sys.stderr)
    stops = [NEWLINE, EOS] if not args.prompt else [lm.tokenizer.eos_token_id or EOS]

    def generate(spec):
        outs, stats = [], []
        with DecodeSession(lm.model, [args.state], window=args.window, seed=args.seed, backend=args.backend,
                           draft=spec) as s:
            for p in tqdm(prompts, desc=f"generate ({'draft ' + spec.text if spec else 'plain'})"):
                ids = torch.tensor([lm.tokenizer.encode(p, add_special_tokens=False)])
                t0 = time.perf_counter()
                outs.append(s.generate(ids, args.max_new_tokens, stop_token_ids=stops)[0])
                stats.append((s.spec_stats, time.perf_counter() - t0))
        return outs, stats

    outs, stats = generate(draft)
    ref = generate(None)[0] if args.check else None
    for i, (p, row) in enumerate(zip(prompts, outs)):
        print(f"--- prompt {i}: {p[:60]!r}{'...' if len(p) > 60 else ''}")
        print(lm.tokenizer.decode(row, skip_special_tokens=True))
        st, sec = stats[i]
        line = f"    {len(row)} tokens in {sec:.2f} s"
        if st is not None:
            line += (f"; {st.steps} model steps, {st.tokens_per_step:.2f} tokens/step, "
                     + (f"drafts accepted {st.accepted}/{st.drafted} ({st.acceptance_rate:.1%})" if st.drafted
                        else "no draft proposed (no n-gram of the text repeated)"))
        if ref is not None:
            line += "; identical to plain greedy: " + ("yes" if ref[i] == row else "NO")
        print(line)
    return 0 if ref is None or ref == outs else 1
