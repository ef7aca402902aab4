"""``replayssm-quant downstream``: lm-eval accuracy per generation-length quartile, fp32 vs state specs."""

# the light module only (json, re, pathlib): no lm-eval / torch import at `--help` time
from replayssm_quant.eval.downstream import DEFAULT_MAX_BATCH_TOKENS

HELP = "lm-eval downstream accuracy by generation-length quartile: fp32 reference vs each --state spec"

DEFAULT_RUNS = ["nvfp4+sr", "nvfp4/fp8+sr", "nvfp4/fp16", "fp8+sr", "conventional:fp8+sr"]


def configure(parser):
    parser.add_argument("--model", nargs="+", action="extend", default=None, metavar="MODEL",
                        help="one or more models (repeatable): gdn-demo, mamba2-demo, tiny-ARCH, a folder or a "
                             "hub id (default: gdn-demo)")
    parser.add_argument("--tasks", nargs="+", default=["replayssm_synth"], metavar="TASK",
                        help="lm-eval tasks (generate_until); the packaged synthetic tasks are replayssm_copy, "
                             "replayssm_upper (tag replayssm_synth, the default), and for the long-memory models "
                             "replayssm_count, replayssm_recall (tag replayssm_long); real tasks such as gsm8k "
                             "work by name where their datasets can be fetched")
    parser.add_argument("--state", nargs="+", action="extend", default=None, metavar="[MODE:]SPEC",
                        help="runs besides the fp32 reference (repeatable, as in `eval`): SPEC optionally prefixed "
                             "by replay: or conventional:, e.g. nvfp4/fp8+sr conventional:fp8+sr "
                             "(default: " + " ".join(DEFAULT_RUNS) + ")")
    parser.add_argument("--mode", default="replay", choices=["replay", "conventional"],
                        help="decode mode of --state values without a MODE: prefix (default replay)")
    parser.add_argument("--out", default="reports/downstream",
                        help="results folder: samples per run, config, report (default reports/downstream); "
                             "a rerun into it skips finished runs")
    parser.add_argument("--limit", type=float, default=None,
                        help="samples per task (int) or fraction (<1) for quick runs (default: all)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="at most this many decode rows (requests) per batch (default 64)")
    parser.add_argument("--max-batch-tokens", default=str(DEFAULT_MAX_BATCH_TOKENS), metavar="N",
                        help="token budget of a batch, besides --batch-size: rows x (longest prompt of the "
                             "batch + max_gen_toks) <= N, which bounds the prefill's memory (it grows with "
                             "rows x padded length); prompts are sorted by length, a prompt over the budget "
                             "runs alone; 0 or none = no budget, rows limited by --batch-size only "
                             f"(default {DEFAULT_MAX_BATCH_TOKENS}; the plugin's model_arg max_batch_tokens)")
    parser.add_argument("--max-gen-toks", type=int, default=None,
                        help="override every task's max_gen_toks (smoke runs; default: the task's own)")
    parser.add_argument("--num-fewshot", type=int, default=None, help="lm-eval num_fewshot (default: task's)")
    parser.add_argument("--window", type=int, default=16, help="replay window L (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="stochastic-rounding seed (default 0)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--device-map", default=None,
                        help="auto (spread a large model over the GPUs, then the CPU; accelerate) or a JSON object "
                             "{module: N | cpu | disk}")
    parser.add_argument("--dtype", default="auto", metavar="auto|bfloat16|float16|float32",
                        help="dtype of the model weights (default auto: the checkpoint's, bf16 for released models); "
                             "the SSM states stay float32")
    parser.add_argument("--backend", default=None, choices=["triton", "torch"],
                        help="state-cache kernels (default: triton on CUDA, torch on CPU)")
    parser.add_argument("--metric", default="exact_match", help="per-sample metric to score (default exact_match)")
    parser.add_argument("--filter", default=None,
                        help="lm-eval filter whose samples to score for tasks with several (gsm8k: "
                             "strict-match, flexible-extract; default: the task's first)")
    parser.add_argument("--include-path", nargs="*", default=None, metavar="DIR",
                        help="extra lm-eval task folders (the packaged tasks are always included)")
    parser.add_argument("--report-only", action="store_true",
                        help="only rebuild the report from the finished runs in --out")


def _limit(x):
    if x is None:
        return None
    if x <= 0:
        raise ValueError(f"--limit must be > 0, got {x:g}")
    return int(x) if x >= 1 else x


def _max_batch_tokens(x) -> int | None:
    """``--max-batch-tokens``: an integer >= 1, or None for 0 / none (no budget)."""
    text = str(x).strip().lower()
    if text == "none":
        return None
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise ValueError(f"--max-batch-tokens must be an integer >= 0 (0 or none = no budget), got {x!r}")
    return v or None


def run(args):
    from pathlib import Path

    from replayssm_quant.eval.downstream import plan_runs, run_downstream
    from replayssm_quant.eval.downstream_report import write_report

    out = Path(args.out)
    if not args.report_only:
        from replayssm_quant.eval.allocator import use_expandable_segments

        use_expandable_segments()                 # before the first CUDA tensor (eval/allocator.py)
        from replayssm_quant.eval.adapters.dtypes import parse_weight_dtype

        from replayssm_quant.cli import default_states, device_arg

        parse_weight_dtype(args.dtype)            # a bad value: one line, exit 2
        if args.device is not None:
            device_arg(args.device)
        for name, v in (("--batch-size", args.batch_size), ("--window", args.window)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if args.max_gen_toks is not None and args.max_gen_toks < 1:
            raise ValueError(f"--max-gen-toks must be >= 1, got {args.max_gen_toks}")
        max_batch_tokens = _max_batch_tokens(args.max_batch_tokens)
        runs = plan_runs(args.state or default_states(DEFAULT_RUNS, args.mode), args.mode)
        gen_kwargs = None if args.max_gen_toks is None else f"max_gen_toks={args.max_gen_toks}"
        run_downstream(out, args.model or ["gdn-demo"], runs, args.tasks, limit=_limit(args.limit),
                       batch_size=args.batch_size, max_batch_tokens=max_batch_tokens, device=args.device,
                       window=args.window, seed=args.seed, backend=args.backend, gen_kwargs=gen_kwargs,
                       num_fewshot=args.num_fewshot, metric=args.metric, filter_name=args.filter,
                       include_path=args.include_path, device_map=args.device_map, dtype=args.dtype)
    md = write_report(out)
    print(f"report: {md}")
    return 0
