"""The training loop of the embedded default models.

:func:`train` builds a stock HF hybrid (:mod:`..models.configs`), trains it on the training books
mixed with synthetic task examples (:mod:`.data`) under bf16 autocast with the fast chunked
GDN/SSD paths installed (:mod:`..models.training_paths`), AdamW with warmup + cosine decay over
the wall-clock budget (or a step count), saves the model folder in bf16 with its byte tokenizer,
then reloads that folder with ``AutoModelForCausalLM`` (stock code, fp32) and evaluates it.

Output folder ``out/<arch>/`` (a loadable HF model folder): config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json, plus
train_log.csv (one row per logged step), train_meta.json (settings, sizes, throughput),
eval.json (held-out bits per byte at each context, task accuracy per length quartile, the
reference continuation loss checked by the tests) and task_eval.csv (one row per task instance).

Reproducibility: initialisation, data order and task instances follow ``seed``; the learning-rate
schedule follows the wall clock, so two runs match step for step only with a step budget
(``max_steps`` and ``minutes=0``).

Model selection: the last 4% of every training book is validation text (never trained on); the
shipped weights are the checkpoint with the best validation bits per byte (usually the last step).
The held-out books are measured alongside for the training curve but never used for a decision.
torch.compile is optional (``compile=True``): at ~5M parameters and 16K-token batches (4 x 4096) the eager
step is dominated by large fp32 tensors that the fast chunked paths already batch, and the compile
warm-up (several graphs, forward and backward) would come out of the 6.6-minute default budget.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import queue
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..gutenberg import heldout_books, read_books, train_books
from ..models.configs import ARCHS, LONG_ARCHS, LONG_DT_RANGE, build_config, build_model
from ..models.tokenizer import EOS_ID, PAD_ID, BOS_ID, build_byte_tokenizer
from ..models.training_paths import fast_training_paths
from ..synthetic_tasks import (COUNT_MAX_LEN, COUNT_MIN_LEN, DEFAULT_MAX_LEN, DEFAULT_MIN_LEN, RECALL_MAX_DIST,
                               RECALL_MIN_DIST, heldout_count_tasks, heldout_recall_tasks, heldout_tasks)
from . import evaluate as ev
from .data import TASK_FAMILIES, BatchSampler, heldout_windows, split_validation

LN2 = math.log(2.0)


@dataclasses.dataclass
class TrainSettings:
    """Everything a run depends on (recorded in train_meta.json)."""
    arch: str = "gdn"
    size: str = "default"
    minutes: float = 6.6             # wall-clock budget of the training loop (compile included)
    max_steps: int | None = None     # optional step cap; the LR schedule follows whichever ends first
    # many small steps: copying (the attention's lookup) forms after ~1.5-2.7K steps; 8 x 8192 batches
    # gave only 330-700 steps in the budget and it never formed (reports/models/RUN.md)
    batch_size: int = 4
    seq_len: int = 4096              # holds a whole 2000-byte task example (prompt + answer)
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_frac: float = 0.03
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    task_fraction: float = 0.75       # copying needs an induction mechanism to form: 3 of 4 rows are tasks
    task_curriculum: float = 0.0      # task lengths grow from 64 bytes to full over this fraction of the run
    task_loss_weight: float = 0.0     # > 0: loss = book mean + this * task-answer mean (0: one mean over all bytes)
    task_family: str | None = None   # "copy" or "recall" (None: recall for the -long archs, copy otherwise)
    task_count_share: float = 0.0     # recall family: share of recall examples with a counting filler (+ half as
    #                                   many plain counting examples; evaluated on heldout_count_tasks)
    long_dt_max: float = LONG_DT_RANGE[1]   # -long archs: initial step sizes log-uniform in [LONG_DT_RANGE[0], this]
    seed: int = 0
    compile: bool = False            # torch.compile the layers (regional); see the module doc
    log_every: int = 10
    val_every_s: float = 20.0        # validation + held-out bpb on 2K windows this often
    val_fraction: float = 0.04       # last 4% of every training book: validation (model selection)
    val_windows: int = 48            # 2K windows of validation text per evaluation
    keep_best: bool = True           # ship the checkpoint with the best validation bpb (not the held-out books)
    ckpt_every_s: float = 90.0       # save the model folder this often while training
    data_dir: str | None = None
    device: str | None = None
    init_from: str | None = None     # a second stage: start from this model folder's weights (see _init_from)
    # evaluation after training
    eval_contexts: tuple = (2048, 16384)
    eval_max_windows: int | None = None   # cap on held-out windows per context (None = all)
    eval_batch_tokens: int = 32768
    eval_tasks: int = 64
    eval_task_max_len: int = DEFAULT_MAX_LEN
    eval_task_batch: int = 16
    eval_recall_max_dist: int = RECALL_MAX_DIST   # recall evaluation distances RECALL_MIN_DIST..this

    @property
    def family(self) -> str:
        """The task family trained and evaluated (``task_family`` or the arch's default)."""
        return self.task_family or ("recall" if self.arch in LONG_ARCHS else "copy")

    def check(self):
        if self.arch not in ARCHS:
            raise ValueError(f"unknown --arch {self.arch!r}; allowed: {', '.join(ARCHS)}")
        if self.family not in TASK_FAMILIES:
            raise ValueError(f"unknown task family {self.family!r}; allowed: {', '.join(TASK_FAMILIES)}")
        if self.task_loss_weight < 0:
            raise ValueError(f"--task-loss-weight must be >= 0, got {self.task_loss_weight}")
        if not 0.0 <= self.task_count_share <= 1.0 or (self.task_count_share and self.family != "recall"):
            raise ValueError(f"--task-count-share must be in [0, 1] and needs the recall family, got "
                             f"{self.task_count_share} with {self.family!r}")
        if not LONG_DT_RANGE[0] < self.long_dt_max <= 1.0:
            raise ValueError(f"--long-dt-max must be in ({LONG_DT_RANGE[0]}, 1], got {self.long_dt_max}")
        if not 0.0 <= self.task_curriculum < 1.0:
            raise ValueError(f"--task-curriculum must be in [0, 1), got {self.task_curriculum}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"--steps must be >= 1 (a cap on optimizer steps; leave it out for none), got "
                             f"{self.max_steps}")
        if self.minutes <= 0 and not self.max_steps:
            raise ValueError("give a positive --minutes budget or --steps")
        if self.seq_len < 2048 and self.size == "default":
            raise ValueError(f"--seq-len must be >= 2048 for the default models, got {self.seq_len}")


def task_family_of(folder: str | Path) -> str:
    """The task family a model folder was trained on, from its train_meta.json ('copy' without one)."""
    meta = Path(folder) / "train_meta.json"
    st = json.loads(meta.read_text()).get("settings", {}) if meta.exists() else {}
    return st.get("task_family") or ("recall" if st.get("arch") in LONG_ARCHS else "copy")


def _param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.ndim >= 2 and "embed" not in name:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def _lr_at(progress: float, s: TrainSettings) -> float:
    if progress < s.warmup_frac:
        return s.lr * max(progress / s.warmup_frac, 1e-3)
    t = min(1.0, (progress - s.warmup_frac) / max(1e-9, 1.0 - s.warmup_frac))
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


class _Prefetcher:
    """Builds batches on a background thread (the GPU step releases the GIL)."""

    def __init__(self, sampler: BatchSampler, depth: int = 4):
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.sampler = sampler
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            b = self.sampler.next_batch()
            while not self.stop:
                try:
                    self.q.put(b, timeout=0.5)
                    break
                except queue.Full:
                    continue

    def get(self):
        return self.q.get()

    def close(self):
        self.stop = True


#: running sums of the training loop, in the order :func:`_loss_parts` returns them
_ACC_KEYS = ("loss", "book", "task", "tok_acc", "exact")


def _loss_parts(logits, labels, is_task, position_ids=None, task_weight: float = 0.0):
    """Loss and monitoring numbers from logits [B, T, V] and HF-aligned labels [B, T].

    Returns ``(loss, book, task, task_tok_acc, task_exact)``: the mean loss over all trained
    positions (the tensor to backpropagate), book nats/byte, task nats/byte (answer bytes), the
    teacher-forced top-1 accuracy of the answer bytes, and the fraction of task examples whose
    every answer byte is the top-1 prediction (teacher-forced exact match; examples are the
    segments where ``position_ids`` [B, T] restarts at 0; without it, NaN). All but ``loss`` are
    detached scalars. With ``task_weight`` > 0 the loss is instead ``book mean + task_weight * task
    mean`` (each averaged over its own bytes), so the answer bytes keep a fixed share of the gradient.
    """
    tgt = labels[:, 1:]
    lg = logits[:, :-1].float()
    nll = F.cross_entropy(lg.transpose(1, 2), tgt, ignore_index=-100, reduction="none")
    valid = tgt != -100
    loss = (nll * valid).sum() / valid.sum().clamp(min=1)
    # masks by multiplication, not boolean indexing: no host sync inside the training step
    t_valid = valid & is_task[:, None]
    b_valid = valid & ~is_task[:, None]
    book = (nll * b_valid).sum() / b_valid.sum().clamp(min=1)
    task = (nll * t_valid).sum() / t_valid.sum().clamp(min=1)
    if task_weight > 0:
        loss = book + task_weight * task
    book, task = book.detach(), task.detach()
    with torch.no_grad():
        hit = (lg.argmax(-1) == tgt) & t_valid
        tok_acc = hit.sum() / t_valid.sum().clamp(min=1)
        exact = torch.tensor(float("nan"), device=logits.device)
        if position_ids is not None:
            seg = (position_ids == 0).long().cumsum(1)[:, 1:]          # example id per target position
            seg = (seg + torch.arange(seg.shape[0], device=seg.device)[:, None] * (seg.shape[1] + 1)).flatten()
            n_seg = tgt.shape[0] * (tgt.shape[1] + 1)
            miss = torch.zeros(n_seg, device=seg.device).index_add_(0, seg, (t_valid & ~hit).flatten().float())
            has = torch.zeros(n_seg, device=seg.device).index_add_(0, seg, t_valid.flatten().float())
            trained = has > 0
            exact = ((miss == 0) & trained).sum() / trained.sum().clamp(min=1)
    return loss, book, task, tok_acc, exact


def _train_forward_backward(model, ids, labels, positions, is_task, amp, task_weight=0.0):
    with torch.autocast(**amp):
        logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
    parts = _loss_parts(logits, labels, is_task, positions, task_weight)
    parts[0].backward()
    return parts


def _layers(model):
    """The decoder blocks of a stock model (``model.model.layers`` or Mamba2's ``model.backbone.layers``)."""
    return (getattr(model, "model", None) or model.backbone).layers


def _uncompile(model):
    for layer in _layers(model):
        layer._compiled_call_impl = None


def _eager():
    """Context: run compiled modules eagerly (no recompilation for eval-mode / no-grad calls)."""
    import contextlib

    stance = getattr(torch.compiler, "set_stance", None)
    return stance("force_eager") if stance is not None else contextlib.nullcontext()


_SHAPE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
               "num_key_value_heads", "vocab_size", "layer_types", "layers_block_type", "linear_num_value_heads",
               "mamba_num_heads", "ssm_state_size")


def _init_from(model, folder: str | Path) -> dict:
    """Load the weights of a model folder saved by :func:`train` into ``model`` (a second training
    stage: fresh optimizer and learning-rate schedule, other data order with another ``seed``).

    Returns the earlier stage's record: ``dict(folder, steps, tokens, train_seconds, settings, log_rows)``
    (``log_rows``: its train_log.csv rows, which start the new log so the curves are continuous).
    Raises ``FileNotFoundError`` / ``ValueError`` naming what is missing or different.
    """
    folder = Path(folder)
    for f in ("config.json", "model.safetensors"):
        if not (folder / f).exists():
            raise FileNotFoundError(f"--init-from {folder}: no {f} (a model folder written by train-demo)")
    cfg = json.loads((folder / "config.json").read_text())
    ours = model.config.to_dict()
    diff = [f"{k}: {cfg.get(k)!r} there, {ours.get(k)!r} here" for k in _SHAPE_KEYS if cfg.get(k) != ours.get(k)]
    if diff:
        raise ValueError(f"--init-from {folder} holds another architecture or size than --arch/--size ask for ("
                         + "; ".join(diff) + ")")
    from transformers import AutoModelForCausalLM

    # through transformers' loader: it maps the on-disk key names (e.g. Nemotron-H's "backbone.") to the module's
    state = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"--init-from {folder}: weights do not match the model (missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]})")
    meta = json.loads((folder / "train_meta.json").read_text()) if (folder / "train_meta.json").exists() else {}
    rows = []
    if (folder / "train_log.csv").exists():
        with open(folder / "train_log.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    return {"folder": str(folder), "steps": int(meta.get("steps", 0)), "tokens": int(meta.get("tokens", 0)),
            "train_seconds": float(meta.get("train_seconds", 0.0)), "settings": meta.get("settings"),
            "log_rows": rows}


def save_model_folder(model, folder: Path, tokenizer=None):
    """Save ``model`` in bf16 safetensors with the byte tokenizer (a copy; ``model`` is untouched).

    Written into a sibling ``<folder>.saving`` and moved file by file (``os.replace``), so a reader
    (the packing loop of scripts/gpu/train_long.sh) never sees a half-written file.
    """
    import os
    import shutil

    from transformers import AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    final, folder = folder, folder.parent / (folder.name + ".saving")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    m = AutoModelForCausalLM.from_config(model.config)   # a plain copy (the trained one may be compiled)
    m.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()})
    m = m.to(torch.bfloat16)
    m.generation_config.bos_token_id, m.generation_config.eos_token_id = BOS_ID, EOS_ID
    m.generation_config.pad_token_id = PAD_ID
    m.save_pretrained(folder, safe_serialization=True)
    (tokenizer or build_byte_tokenizer()).save_pretrained(folder)
    for f in folder.iterdir():
        os.replace(f, final / f.name)
    folder.rmdir()


def train(s: TrainSettings, out: str | Path, progress: bool = True) -> Path:
    """Train, save and evaluate one model; returns the model folder ``out/<arch>``."""
    s.check()
    out = Path(out)
    folder = out / s.arch
    folder.mkdir(parents=True, exist_ok=True)
    device = torch.device(s.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(s.seed)
    if device.type == "cuda":  # the fp32 chunked GDN/SSD math stays true fp32 (no TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    train_paths, held_paths = train_books(s.data_dir), heldout_books(s.data_dir)
    train_parts, val_parts = split_validation(read_books(train_paths), s.val_fraction)
    sampler = BatchSampler(train_parts, s.batch_size, s.seq_len, s.task_fraction, s.seed, task_family=s.family,
                           count_share=s.task_count_share)
    held = read_books(held_paths)
    win = min(2048, s.seq_len)
    n_val = s.val_windows if s.size == "default" else min(s.val_windows, 4)
    val_windows = heldout_windows(val_parts, win, max_windows=n_val) if val_parts else None
    held_windows = heldout_windows(held, win, max_windows=n_val)

    model = build_model(s.arch, s.size, s.seed, dt_range=(LONG_DT_RANGE[0], s.long_dt_max))
    prior = _init_from(model, s.init_from) if s.init_from else None
    model = model.to(device)
    # a second stage continues the numbering of steps, tokens and seconds of the first
    off = {"step": prior["steps"], "tokens": prior["tokens"], "s": prior["train_seconds"]} if prior else \
        {"step": 0, "tokens": 0, "s": 0.0}
    n_params = sum(p.numel() for p in model.parameters())
    model.train()
    opt = torch.optim.AdamW(_param_groups(model, s.weight_decay), lr=s.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.type == "cuda")
    if s.compile:
        from torch import _dynamo

        for name in ("cache_size_limit", "recompile_limit"):  # one graph per layer kind, not per layer
            if hasattr(_dynamo.config, name):
                setattr(_dynamo.config, name, max(64, getattr(_dynamo.config, name)))
        for layer in _layers(model):   # regional compilation: identical layers share the code
            layer.compile()
    amp = dict(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    meta = {"settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(s).items()},
            "n_params": n_params, "device": str(device), "torch": torch.__version__,
            "train_books": [p.name for p in train_paths], "heldout_books": [p.name for p in held_paths],
            "train_bytes": int(len(sampler.stream))}
    if prior:
        meta["init_from"] = {k: prior[k] for k in ("folder", "steps", "tokens", "train_seconds", "settings")}
    print(f"[train-demo] {s.arch}: {n_params / 1e6:.2f}M parameters on {device}; batch {s.batch_size} x "
          f"{s.seq_len} tokens; budget {s.minutes} min" + (f", at most {s.max_steps} steps" if s.max_steps else ""),
          flush=True)

    log_path = folder / "train_log.csv"
    fields = ["step", "tokens", "elapsed_s", "tok_per_s", "lr", "loss", "book_bpb", "task_loss_nats", "task_tok_acc",
              "task_exact_tf", "val_bpb", "heldout_bpb"]
    logf = open(log_path, "w", newline="")
    writer = csv.DictWriter(logf, fieldnames=fields)
    writer.writeheader()
    for r in (prior or {}).get("log_rows", []):
        writer.writerow({k: r.get(k, "") for k in fields})

    prefetch = _Prefetcher(sampler)
    budget = s.minutes * 60.0 if s.minutes > 0 else float("inf")
    t0 = time.time()
    last_val = last_ckpt = last_print = t0
    step = tokens = 0
    acc = dict.fromkeys(_ACC_KEYS + ("n",), 0.0)
    t_log, tok_log = t0, 0
    best = {"val_bpb": float("inf"), "step": 0, "state": None}
    interrupted = False

    def measure(windows):
        model.eval()
        tot = 0.0
        with torch.no_grad(), torch.autocast(**amp), _eager():
            for i in range(0, len(windows), s.batch_size):
                w = windows[i:i + s.batch_size].to(device)
                lg = model(input_ids=w, use_cache=False).logits
                tot += float(F.cross_entropy(lg[:, :-1].float().transpose(1, 2), w[:, 1:], reduction="sum"))
        model.train()
        return tot / (windows.shape[0] * (windows.shape[1] - 1)) / LN2

    def validate(step):
        with fast_training_paths():
            val = measure(val_windows) if val_windows is not None else float("nan")
            if val < best["val_bpb"]:   # tracked always (train_meta.json); weights kept only with keep_best
                best.update(val_bpb=val, step=step + off["step"])
                if s.keep_best:
                    best["state"] = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            return val, measure(held_windows)

    bar = tqdm(total=int(budget) if math.isfinite(budget) else s.max_steps, disable=not progress,
               desc=f"train {s.arch}", unit="s" if math.isfinite(budget) else "step")
    try:
        with fast_training_paths():
            while True:
                elapsed = time.time() - t0
                progress_frac = elapsed / budget
                if s.max_steps:
                    progress_frac = max(progress_frac, step / s.max_steps)
                if progress_frac >= 1.0:
                    break
                lr = _lr_at(progress_frac, s)
                sampler.set_curriculum(progress_frac, s.task_curriculum)
                for grp in opt.param_groups:
                    grp["lr"] = lr
                batch = [x.to(device, non_blocking=True) for x in prefetch.get()]   # ids, labels, positions, is_task
                opt.zero_grad(set_to_none=True)
                try:
                    parts = _train_forward_backward(model, *batch, amp, s.task_loss_weight)
                except Exception as e:  # a torch.compile failure must not lose the run: go eager
                    if step > 0 or not s.compile or isinstance(e, torch.OutOfMemoryError):
                        raise
                    print(f"[train-demo] torch.compile failed ({type(e).__name__}: {str(e)[:300]}); "
                          f"training without compile", flush=True)
                    _uncompile(model)
                    opt.zero_grad(set_to_none=True)
                    parts = _train_forward_backward(model, *batch, amp, s.task_loss_weight)
                torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
                opt.step()
                step += 1
                tokens += batch[0].numel()
                for key, v in zip(_ACC_KEYS, parts):
                    acc[key] += v.detach()
                acc["n"] += 1
                now = time.time()
                val_bpb = held_bpb = ""
                if now - last_val >= s.val_every_s:
                    val_bpb, held_bpb = validate(step)
                    last_val = time.time()
                last_step = s.max_steps is not None and step >= s.max_steps
                if step % s.log_every == 0 or val_bpb != "" or step == 1 or last_step:
                    n = acc["n"]
                    row = {"step": step + off["step"], "tokens": tokens + off["tokens"],
                           "elapsed_s": round(now - t0 + off["s"], 2),
                           "tok_per_s": round((tokens - tok_log) / max(now - t_log, 1e-9), 1), "lr": lr,
                           "loss": float(acc["loss"]) / n, "book_bpb": float(acc["book"]) / n / LN2,
                           "task_loss_nats": float(acc["task"]) / n, "task_tok_acc": float(acc["tok_acc"]) / n,
                           "task_exact_tf": float(acc["exact"]) / n, "val_bpb": val_bpb, "heldout_bpb": held_bpb}
                    writer.writerow(row)
                    logf.flush()
                    acc = dict.fromkeys(_ACC_KEYS + ("n",), 0.0)
                    t_log, tok_log = now, tokens
                    msg = (f"step {step} tok {tokens / 1e6:.1f}M {row['tok_per_s'] / 1e3:.0f}k tok/s lr {lr:.2e} "
                           f"loss {row['loss']:.3f} book {row['book_bpb']:.3f} bpb | task {row['task_loss_nats'] / LN2:.3f} bpb "
                           f"byte-acc {row['task_tok_acc']:.3f} exact(tf) {row['task_exact_tf']:.3f}"
                           + (f" | val {val_bpb:.3f} held-out {held_bpb:.3f} bpb" if val_bpb != "" else ""))
                    if progress:
                        bar.set_postfix_str(msg)
                    if step == 1 or val_bpb != "" or (not progress and now - last_print >= 10.0):
                        print(f"[train-demo] {now - t0:6.1f}s {msg}", flush=True)
                        last_print = now
                if math.isfinite(budget):
                    bar.n = min(int(now - t0), int(budget))
                    bar.refresh()
                else:
                    bar.update(1)
                if now - last_ckpt >= s.ckpt_every_s:   # a cut-off run still leaves loadable weights
                    save_model_folder(model, folder)
                    (folder / "train_meta.json").write_text(json.dumps(
                        {**meta, "partial": True, "steps": step + off["step"], "tokens": tokens + off["tokens"],
                         "train_seconds": round(now - t0 + off["s"], 1), "selected_step": step + off["step"]},
                        indent=1))
                    last_ckpt = time.time()
    except KeyboardInterrupt:   # SIGINT (e.g. a wall-clock `timeout`): keep what was trained
        if step == 0:
            raise
        interrupted = True
        print(f"[train-demo] interrupted at step {step}: saving the weights, no final evaluation", flush=True)
    finally:
        prefetch.close()
        bar.close()
        logf.close()
    train_s = time.time() - t0
    if interrupted:
        save_model_folder(model, folder)
        (folder / "train_meta.json").write_text(json.dumps(
            {**meta, "partial": True, "interrupted": True, "steps": step + off["step"], "tokens": tokens + off["tokens"],
             "train_seconds": round(train_s + off["s"], 1), "selected_step": step + off["step"],
             "mean_tok_per_s": round(tokens / max(train_s, 1e-9), 1)}, indent=1))
        return folder
    final_val, final_held = validate(step)
    writer_row = {"step": step + off["step"], "tokens": tokens + off["tokens"], "elapsed_s": round(train_s + off["s"], 2), "tok_per_s": "", "lr": "",
                  "loss": "", "book_bpb": "", "task_loss_nats": "", "val_bpb": final_val, "heldout_bpb": final_held}
    with open(log_path, "a", newline="") as f:
        csv.DictWriter(f, fieldnames=fields).writerow(writer_row)
    selected = step + off["step"]
    if s.keep_best and best["state"] is not None and best["step"] != selected:
        model.load_state_dict(best["state"])
        selected = best["step"]
    print(f"[train-demo] final validation {final_val:.4f} bpb (held-out {final_held:.4f}); best validation "
          f"{best['val_bpb']:.4f} at step {best['step']}; shipping step {selected}", flush=True)
    meta.update({"steps": step + off["step"], "tokens": tokens + off["tokens"],
                 "train_seconds": round(train_s + off["s"], 1),
                 "mean_tok_per_s": round(tokens / max(train_s, 1e-9), 1), "selected_step": selected,
                 "stage": {"steps": step, "tokens": tokens, "train_seconds": round(train_s, 1)},
                 "best_val_bpb": best["val_bpb"] if math.isfinite(best["val_bpb"]) else None, "final_val_bpb": final_val, "final_heldout_bpb": final_held,
                 "validation": f"last {s.val_fraction:.0%} of every training book"})
    print(f"[train-demo] trained {step} steps, {tokens / 1e6:.1f}M tokens in {train_s:.0f}s "
          f"({meta['mean_tok_per_s'] / 1e3:.0f}k tok/s); saving {folder}", flush=True)
    save_model_folder(model, folder)
    (folder / "train_meta.json").write_text(json.dumps(meta, indent=1))
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    evaluate_folder(folder, s, device, progress)
    return folder


def evaluate_folder(folder: Path, s: TrainSettings, device=None, progress: bool = True) -> dict:
    """Reload ``folder`` with AutoModelForCausalLM (stock code, fp32) and write eval.json + task_eval.csv."""
    from transformers import AutoModelForCausalLM

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":  # true fp32 numbers
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    held_paths = heldout_books(s.data_dir)
    held = read_books(held_paths)
    res = {"model_type": model.config.model_type, "arch": s.arch, "dtype": "float32",
           "heldout_books": [p.name for p in held_paths], "bpb": {}}
    train_ctx = s.seq_len
    for ctx in s.eval_contexts:
        win = heldout_windows(held, ctx, s.eval_max_windows)
        bs = max(1, s.eval_batch_tokens // ctx)
        r = ev.bits_per_byte(model, win, bs, tail_from=train_ctx if ctx > train_ctx else None, device=device,
                             desc=f"held-out bpb @{ctx}", progress=progress)
        r["windows"] = int(len(win))
        res["bpb"][str(ctx)] = r
        print(f"[train-demo] held-out bits/byte at {ctx} context: {r['bpb']:.4f}"
              + (f" (positions >= {train_ctx}: {r['bpb_tail']:.4f})" if "bpb_tail" in r else ""), flush=True)
    if s.family == "recall":
        tasks = heldout_recall_tasks(s.eval_tasks, RECALL_MIN_DIST, s.eval_recall_max_dist)
        df = ev.recall_accuracy(model, tasks, s.eval_task_batch, device, progress)
        q = ev.accuracy_by_quartile(df, "distance")
    else:
        tasks = heldout_tasks(s.eval_tasks, DEFAULT_MIN_LEN, s.eval_task_max_len)
        df = ev.task_accuracy(model, tasks, s.eval_task_batch, device, progress)
        q = ev.accuracy_by_quartile(df)
    df.to_csv(folder / "task_eval.csv", index=False)
    res["task_family"] = s.family
    res["task_accuracy"] = {"overall_pct": float(df["correct"].mean() * 100), "n": int(len(df)),
                            "by_quartile": q.to_dict(orient="records"),
                            "by_task_pct": {k: float(v * 100) for k, v in df.groupby("task")["correct"].mean().items()}}
    print(f"[train-demo] {s.family} task exact match by {'distance' if s.family == 'recall' else 'length'} quartile:\n" + q.to_string(index=False), flush=True)
    if s.task_count_share:
        n = max(4, s.eval_tasks // 4)
        tasks = heldout_count_tasks(n, max_len=max(COUNT_MIN_LEN, min(COUNT_MAX_LEN, s.eval_task_max_len)))
        cdf = ev.task_accuracy(model, tasks, s.eval_task_batch, device, progress)
        cdf.to_csv(folder / "count_eval.csv", index=False)
        cq = ev.accuracy_by_quartile(cdf)
        res["count_accuracy"] = {"overall_pct": float(cdf["correct"].mean() * 100), "n": int(len(cdf)),
                                 "by_quartile": cq.to_dict(orient="records")}
        print("[train-demo] count task exact match by length quartile:\n" + cq.to_string(index=False), flush=True)
    res["reference"] = ev.reference_loss(model, held_paths[0], device)
    res["eval_seconds"] = round(time.time() - t0, 1)
    (folder / "eval.json").write_text(json.dumps(res, indent=1, default=str))
    return res
