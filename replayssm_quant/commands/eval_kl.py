"""``replayssm-quant eval``: the KL evaluation (DESIGN.md sec. 6).

Each ``--state`` is ``[MODE[@L]:]SPEC``: a state spec (``nvfp4/fp8+sr``) optionally
prefixed by its decode mode (``conventional:fp8+sr``) and, for replay, its own window
(``replay@4:nvfp4+sr``); specs without a prefix use ``--mode`` (default replay) and
``--window``. The fp32 replay reference is always run.
"""

from __future__ import annotations

HELP = "KL of each state spec against fp32 over teacher-forced decoding (resumable; writes a report)"

DEFAULT_STATES = ["bf16", "fp16", "fp8+sr", "nvfp4+sr", "nvfp4/fp16", "nvfp4/fp8+sr", "fp8/fp16",
                  "conventional:fp16+sr", "conventional:fp8+sr"]


def configure(parser):
    parser.add_argument("--model", default=None,
                        help="gdn-long (default, embedded), mamba2-long, gdn-demo, mamba2-demo, tiny-ARCH, a local "
                             "folder or a hub id")
    parser.add_argument("--state", action="append", default=None, metavar="[MODE[@L]:]SPEC",
                        help="state variant, repeatable: SPEC (fp32, FMT[+sr], READ/RECUR[+sr]) optionally "
                             "prefixed by replay:, replay@L: (own window L) or conventional: (default list: "
                             + " ".join(DEFAULT_STATES) + "); the fp32 replay reference always runs")
    parser.add_argument("--mode", default="replay", choices=["replay", "conventional"],
                        help="decode mode of --state values without a MODE: prefix (default replay)")
    parser.add_argument("--window", type=int, default=16, help="replay window L (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="stochastic-rounding seed (default 0)")
    parser.add_argument("--data", default=None,
                        help="sampled (default: text sampled from the fp32 embedded model, shipped with the package), "
                             "heldout-books (the held-out Gutenberg books, if present), pg19, or a "
                             ".txt/.parquet/.jsonl file or folder")
    parser.add_argument("--text-field", default="text", help="column/key holding the text in parquet/jsonl (default text)")
    parser.add_argument("--prefill", type=int, default=256, help="prefill tokens P (default 256)")
    parser.add_argument("--tokens", type=int, default=256, help="teacher-forced decode tokens N per document (default 256)")
    parser.add_argument("--docs", type=int, default=2, help="documents K (default 2)")
    parser.add_argument("--batch-docs", type=int, default=8,
                        help="documents per batch; rows per batch = docs x variants (default 8)")
    parser.add_argument("--out", default="kl_results", help="results folder; rerun to resume (default ./kl_results)")
    parser.add_argument("--device", default=None, help="cpu / cuda / cuda:N (default: cuda if available)")
    parser.add_argument("--device-map", default=None,
                        help="auto (spread a large model over the GPUs, then the CPU; accelerate) or a JSON object "
                             "{module: N | cpu | disk}")
    parser.add_argument("--dtype", default="auto", metavar="auto|bfloat16|float16|float32",
                        help="dtype of the model weights (default auto: the checkpoint's, bf16 for released models); "
                             "the SSM states, the fp32 reference's included, stay float32")
    parser.add_argument("--exec", dest="exec_mode", default="chunked-all", metavar="chunked-all|chunked|step",
                        help="chunked-all (default): every variant L tokens per model forward, replay variants "
                             "through the chunked windows (exact, DESIGN.md sec. 3), conventional states stepped "
                             "token by token inside each SSM layer; chunked: only the replay variants so, the "
                             "conventional ones on the step path (a second session); step: every variant one token "
                             "per forward (what the decode kernels do)")
    parser.add_argument("--backend", default=None, choices=["triton", "torch"],
                        help="state-cache backend (default: triton on CUDA, torch on CPU)")
    parser.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                        help="run each SSM layer's decode step and chunked windows eagerly (default on the GPU: "
                             "one CUDA graph per layer for all specs' steps, one for its chunked windows)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--no-report", action="store_true", help="skip writing the report at the end")


#: ``cli`` prints how to resume when a run of this command is interrupted
RESUMABLE = True


def _check_args(args):
    from replayssm_quant.cli import UsageError

    for name in ("prefill", "tokens", "docs", "batch_docs", "window"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")


def _env() -> str:
    import platform

    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return f"{gpu}; torch {torch.__version__}; transformers {transformers.__version__}; python {platform.python_version()}"


def run(args):
    import shlex
    import sys

    _check_args(args)
    if args.no_progress:          # transformers' own bars too (its "Loading weights" bar of a model load)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    from replayssm_quant.cli import default_states, device_arg
    from replayssm_quant.eval.decode import parse_variant

    states = args.state or default_states(DEFAULT_STATES, args.mode)
    variants = [parse_variant(s, args.mode) for s in states]  # ValueError -> exit 2
    variants = list({v.label: v for v in variants}.values())   # each variant once (its first place kept)
    device = device_arg(args.device)
    from replayssm_quant.eval.adapters.dtypes import parse_weight_dtype, weights_dtype
    from replayssm_quant.eval.decode import check_exec_mode

    dtype = parse_weight_dtype(args.dtype)                     # ValueError -> one line, exit 2
    from replayssm_quant.eval.adapters.loading import parse_device_map

    parse_device_map(args.device_map)                          # ValueError -> one line, exit 2, before the load
    check_exec_mode(args.exec_mode)

    import os

    if args.backend == "triton" and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        from replayssm_quant.cli import UsageError

        raise UsageError("--backend triton on the CPU needs TRITON_INTERPRET=1 in the environment (the Triton "
                         "interpreter, slow); use --backend torch (the CPU default)")

    from replayssm_quant.cli import UsageError
    from replayssm_quant.eval.adapters.loading import check_model_name, load_model, model_fingerprint
    from replayssm_quant.eval.data import data_name, iter_texts, make_documents
    from replayssm_quant.eval.kl import KLSettings, run_kl, with_reference
    from replayssm_quant.eval.peak_memory import PhaseMemory
    from replayssm_quant.eval.report import build_report
    from replayssm_quant.eval.memory import model_card
    from replayssm_quant.eval.results import EARLY_KEYS, ResultsStore

    from replayssm_quant.eval.allocator import use_expandable_segments

    alloc_conf = use_expandable_segments()                     # before the first CUDA tensor (eval/allocator.py)
    model_name, _ = check_model_name(args.model)
    config = {"model": model_name, "data": data_name(args.data), "text_field": args.text_field,
              "prefill": args.prefill, "tokens": args.tokens, "window": args.window, "seed": args.seed,
              "batch_docs": args.batch_docs}
    # everything checkable before the model loads: the folder (file? writable? in use?), its settings, the data
    with ResultsStore(args.out) as store:
        store.check(config, EARLY_KEYS)
        texts, num_texts = iter_texts(args.data, args.text_field)
        memory = PhaseMemory()
        with memory.phase("load"):
            lm = load_model(args.model, device=device, device_map=args.device_map, dtype=dtype)
        length = args.prefill + args.tokens + 1
        docs = make_documents(texts, lm.tokenizer, length, args.docs, num_texts=num_texts)
        if not docs:
            raise UsageError(f"no text in --data {config['data']} has {length} tokens "
                             "(prefill + tokens + 1); use a smaller --prefill/--tokens or longer texts")
        if len(docs) < args.docs:
            print(f"note: only {len(docs)} documents of {length} tokens available (asked for {args.docs})",
                  file=sys.stderr)
        st = KLSettings(prefill=args.prefill, tokens=args.tokens, window=args.window, seed=args.seed,
                        batch_docs=args.batch_docs, backend=args.backend, cuda_graphs=args.cuda_graphs,
                        exec_mode=args.exec_mode)
        store.open(dict(config, model=lm.name, model_hash=model_fingerprint(lm.model), model_source=lm.source,
                        model_card=model_card(lm.model, lm.source),
                        dtype=args.dtype, weights_dtype=weights_dtype(lm.model), exec=args.exec_mode,
                        device_map=args.device_map,
                        docs=len(docs), variants=[v.label for v in with_reference(variants)],
                        command="replayssm-quant " + shlex.join(sys.argv[1:]), env=_env(), alloc_conf=alloc_conf),
                   docs)
        kept = store.record_count()
        if kept:
            print(f"{kept} records already in {args.out}: kept (only the missing ones run)")
        summary = run_kl(lm.model, docs, variants, st, store, progress=not args.no_progress, memory=memory)
        if summary["batches"]:
            from replayssm_quant.eval.placement import block_placement

            store.update_config(memory=summary["memory"], placement=block_placement(lm.model))
        tps = summary["row_tokens_per_s"]
        print(f"{summary['records_written']} records written in {summary['batches']} batches"
              + (f", {tps:.1f} row-tokens/s" if tps else " (nothing left to do)") + f"; results in {args.out}")
        if not args.no_report:
            md = build_report(args.out)
            print(f"report: {md}")
    return 0
