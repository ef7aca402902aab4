"""``replayssm-quant train-demo``: train, evaluate and report the embedded default models.

Train one model (GPU; ~6.6 min of training, the default ``--minutes``, + ~2 min evaluation on an H200)::

    replayssm-quant train-demo --arch gdn --out runs/            # -> runs/gdn/ (HF model folder)
    replayssm-quant train-demo --arch mamba2 --out runs/ --minutes 4.5

Re-evaluate an existing folder, or write the report of the shipped models::

    replayssm-quant train-demo --evaluate eval/default_models/gdn
    replayssm-quant train-demo --report      # eval/default_models/* -> ./models_report/ (or --report-dir / --out)
    replayssm-quant train-demo --report --report-dir reports/models     # the repository's copy
    replayssm-quant train-demo --memory eval/default_models/gdn-long    # memory.json + decay.csv (GPU)
"""

HELP = "train the embedded byte-level GDN / Mamba-2 hybrid demo models, evaluate them, write their report"


def configure(parser):
    from replayssm_quant.eval.gutenberg import ENV_VAR

    g = parser.add_argument_group("what to do (default: train)")
    g.add_argument("--report", action="store_true",
                   help="write the report (README.md + PNG) of the model folders in --models-dir to --report-dir")
    g.add_argument("--evaluate", metavar="FOLDER", help="re-run the evaluation of an existing model folder")
    g.add_argument("--memory", metavar="FOLDER", nargs="+",
                   help="measure the SSM memory of model folders (per-head decay, state-reset ablation, recall "
                        "with a reset): writes memory.json and decay.csv into each")
    t = parser.add_argument_group("training")
    t.add_argument("--arch", choices=["gdn", "mamba2", "gdn-long", "mamba2-long"], default="gdn",
                   help="gdn: Qwen3.5-text GDN hybrid; mamba2: Nemotron-H Mamba-2 hybrid; gdn-long: Qwen3.5 with "
                        "one layer-0 attention then GDN layers; mamba2-long: pure Mamba-2 (the -long ones start "
                        "with slow decay and train on key-value recall; default gdn)")
    t.add_argument("--out", help="output folder; the model is written to OUT/<arch>/")
    t.add_argument("--size", choices=["default", "tiny"], default="default", help="tiny: a CPU smoke-test model")
    t.add_argument("--minutes", type=float, default=6.6, help="wall-clock training budget, compile included (default 6.6)")
    t.add_argument("--steps", type=int, default=None, help="optional cap on optimizer steps")
    t.add_argument("--batch-size", type=int, default=4, help="rows per step (default 4)")
    t.add_argument("--seq-len", type=int, default=4096,
                   help="training context in tokens (=bytes), >= 2048 for --size default (default 4096)")
    t.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    t.add_argument("--task-fraction", type=float, default=0.75,
                   help="fraction of rows that are task examples (default 0.75)")
    t.add_argument("--task-curriculum", type=float, default=0.0,
                   help="grow the longest task target from 64 bytes to full over this fraction of the run "
                        "(default 0: full lengths from the start)")
    t.add_argument("--task-family", choices=["copy", "recall"], default=None,
                   help="synthetic task rows: copy/upper lists or long-range key-value recall "
                        "(default: recall for the -long archs, copy otherwise)")
    t.add_argument("--task-count-share", type=float, default=0.0,
                   help="recall family: share of the recall examples whose filler is a counting example "
                        "('count S E' then S..E, trained), plus half as many plain counting examples (default 0)")
    t.add_argument("--long-dt-max", type=float, default=None,
                   help="-long archs: initial step sizes dt log-uniform in [1e-4, this] (default 1e-2; with A in "
                        "[0.01, 1] a larger value adds heads that forget within tens of bytes)")
    t.add_argument("--task-loss-weight", type=float, default=0.0,
                   help="> 0: loss = book mean + this x task-answer mean (default 0: one mean over all trained bytes)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--compile", dest="compile", action="store_true", default=False,
                   help="torch.compile every layer (regional); off by default: eager with the fast chunked "
                        "paths is launch-light at this size and compile warm-up eats the time budget")
    t.add_argument("--no-compile", dest="compile", action="store_false", help="eager (the default)")
    t.add_argument("--keep-last", action="store_true",
                   help="ship the last step instead of the best-validation checkpoint")
    t.add_argument("--ckpt-every", type=float, default=90.0,
                   help="save the model folder every this many seconds while training (default 90)")
    t.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    t.add_argument("--init-from", metavar="FOLDER", default=None,
                   help="a second training stage: start from the weights of this model folder (written by "
                        "train-demo, same --arch/--size) with a fresh optimizer and schedule; its log and step "
                        "count continue (use another --seed for another data order)")
    t.add_argument("--data-dir", default=None,
                   help=f"Gutenberg books folder (default: ${ENV_VAR} or ../shared/data/gutenberg beside the repo)")
    t.add_argument("--no-progress", action="store_true", help="periodic lines instead of a tqdm bar")
    e = parser.add_argument_group("evaluation")
    e.add_argument("--eval-contexts", default="2048,16384", help="held-out bpb context lengths (default 2048,16384)")
    e.add_argument("--eval-max-windows", type=int, default=None, help="cap held-out windows per context")
    e.add_argument("--eval-batch-tokens", type=int, default=32768,
                   help="tokens per held-out bpb batch (default 32768; lower it if the stock Mamba-2 fallback runs out of memory)")
    e.add_argument("--eval-tasks", type=int, default=64, help="held-out task instances (default 64)")
    e.add_argument("--eval-task-max-len", type=int, default=None, help="longest task target (default 2000)")
    e.add_argument("--eval-recall-max-dist", type=int, default=None,
                   help="longest recall distance in bytes (recall family; default 3072)")
    m = parser.add_argument_group("memory (--memory)")
    m.add_argument("--memory-windows", type=int, default=32, help="held-out windows for decay and reset (default 32)")
    m.add_argument("--memory-reset-at", type=int, default=2048, help="state-reset position t (default 2048)")
    m.add_argument("--memory-decay-window", type=int, default=2048, help="decay window bytes (default 2048)")
    m.add_argument("--memory-recall", type=int, default=128, help="recall instances with/without reset (default 128)")
    r = parser.add_argument_group("report")
    r.add_argument("--models-dir", default=None, help="model folders for --report (default: the package's eval/default_models)")
    r.add_argument("--report-dir", default=None,
                   help="report folder (default: --out if given, else ./models_report in the current folder; "
                        "the repository's copy: reports/models)")


def _settings(args, arch=None):
    from replayssm_quant.eval.models.configs import LONG_DT_RANGE
    from replayssm_quant.eval.synthetic_tasks import DEFAULT_MAX_LEN, RECALL_MAX_DIST
    from replayssm_quant.eval.training.loop import TrainSettings

    try:
        contexts = tuple(int(x) for x in args.eval_contexts.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--eval-contexts must be comma-separated integers, got {args.eval_contexts!r}") from None
    if not contexts or min(contexts) < 16:
        raise ValueError(f"--eval-contexts needs at least one length >= 16, got {args.eval_contexts!r}")
    return TrainSettings(
        arch=arch or args.arch, size=args.size, minutes=args.minutes, max_steps=args.steps,
        batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr, task_fraction=args.task_fraction,
        task_curriculum=args.task_curriculum, task_loss_weight=args.task_loss_weight, task_family=args.task_family,
        task_count_share=args.task_count_share, long_dt_max=args.long_dt_max or LONG_DT_RANGE[1],
        seed=args.seed, compile=args.compile, keep_best=not args.keep_last, data_dir=args.data_dir, device=args.device,
        init_from=args.init_from, ckpt_every_s=args.ckpt_every,
        eval_contexts=contexts, eval_max_windows=args.eval_max_windows, eval_tasks=args.eval_tasks,
        eval_batch_tokens=args.eval_batch_tokens,
        eval_task_max_len=args.eval_task_max_len or DEFAULT_MAX_LEN,
        eval_recall_max_dist=args.eval_recall_max_dist or RECALL_MAX_DIST)


def run(args):
    from pathlib import Path

    from replayssm_quant.cli import device_arg

    if args.device is not None:
        device_arg(args.device)                   # a bad or absent device: one line before anything runs
    if args.report:
        from replayssm_quant.eval.model_report import DEFAULT_MODELS_DIR, DEFAULT_REPORT_DIR, write_report

        path = write_report(args.models_dir or DEFAULT_MODELS_DIR, args.report_dir or args.out or DEFAULT_REPORT_DIR)
        print(f"wrote {path}")
        return 0
    if args.memory:
        from replayssm_quant.eval.memory import measure_folder

        for f in args.memory:
            folder = Path(f)
            if not (folder / "config.json").exists():
                raise FileNotFoundError(f"{folder} is not a model folder (no config.json)")
        for f in args.memory:
            r = measure_folder(Path(f), args.data_dir, args.device, reset_at=args.memory_reset_at,
                               n_windows=args.memory_windows, decay_window=args.memory_decay_window,
                               n_recall=args.memory_recall, progress=not args.no_progress)
            reset = {int(x["distance_from"]): round(x["delta_bpb"], 4) for x in r["reset"]}
            print(f"{f}: {r['heads_median_decay16_ge_0.9']:.0%} of {r['heads']} heads keep a median 16-step decay "
                  f">= 0.9; state reset at {r['reset_at']}: bits/byte change by distance {reset}; wrote "
                  f"{Path(f) / 'memory.json'}")
        return 0
    if args.evaluate:
        import json

        from replayssm_quant.eval.models.configs import arch_of
        from replayssm_quant.eval.training.loop import evaluate_folder
        from transformers import AutoConfig

        folder = Path(args.evaluate)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder} is not a model folder (no config.json)")
        meta = folder / "train_meta.json"
        st = json.loads(meta.read_text())["settings"] if meta.exists() else {}
        s = _settings(args, st.get("arch") or arch_of(AutoConfig.from_pretrained(folder)))
        if st:  # evaluate beyond the context the model was trained at, on the task family it learned
            s.seq_len = st["seq_len"]
            s.task_family = args.task_family or st.get("task_family")
            s.task_count_share = args.task_count_share or st.get("task_count_share", 0.0)   # count evaluated too
        evaluate_folder(folder, s, args.device, not args.no_progress)
        print(f"wrote {folder / 'eval.json'}")
        return 0
    if not args.out:
        raise ValueError("training needs --out FOLDER (or use --report / --evaluate FOLDER)")
    from replayssm_quant.eval.training.loop import train

    folder = train(_settings(args), args.out, progress=not args.no_progress)
    print(f"model folder: {folder}")
    return 0
