"""How far a model's SSM states remember: per-head decay and a state-reset ablation.

* :func:`record_log_decay` - context manager that records, for every GDN / Mamba-2 mixer, the
  per-token log decay the model's own chunked path is called with (GDN: the ``g`` argument of
  ``torch_chunk_gated_delta_rule``; Mamba-2: ``A * clamp(softplus(dt + dt_bias))`` from the
  arguments of ``mamba2_chunk_scan``), float32 ``[B, T, H]`` per call.
* :func:`decay_table` - per SSM layer and head, quantiles of the per-token decay ``exp(g_t)`` and of
  the 16-step cumulative decay ``exp(g_t + ... + g_{t+15})`` over every position of the windows.
* :func:`continue_with_reset` / :func:`state_reset_ablation` - run a prefix with the model's cache,
  zero every SSM recurrent state at position t (attention KV caches and the 3-token conv states
  kept), continue, and compare the NLL by distance after t with the run that keeps the state.
* :func:`recall_with_reset` - the recall task's exact match when the SSM states are zeroed right
  before the query: what is left is what attention alone can answer.

All model calls run the model's own code (no fast training paths) in whatever dtype the model is
(the reports use fp32). Windows are int64 ``[n, W]`` byte ids.
"""

from __future__ import annotations

import contextlib
import math

import pandas as pd
import torch
import torch.nn.functional as F

from .models.configs import ssm_mixers
from .models.fast_ssd import discretized_dt
from .models.tokenizer import BOS_ID

LN2 = math.log(2.0)
#: the cumulative-decay span of the report (issue 26: median 16-step decay >= 0.9 in >= 1/4 of heads)
SPAN = 16
#: distance bins (tokens after the reset position) of the state-reset table
RESET_BINS = (0, 16, 64, 256, 512, 768, 1024)


def _chunk_functions():
    """``[(module, name, family)]`` of the chunked SSM functions whose arguments carry the decay."""
    from transformers.models.mamba2 import modeling_mamba2 as mm
    from transformers.models.nemotron_h import modeling_nemotron_h as mn
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    return [(mq, "torch_chunk_gated_delta_rule", "gdn"), (mn, "mamba2_chunk_scan", "mamba2"),
            (mm, "mamba2_chunk_scan", "mamba2")]


def _mamba2_log_decay(dt, A, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    return A.float() * discretized_dt(dt, dt_bias, dt_softplus, dt_limit)   # [B, T, H]


@contextlib.contextmanager
def record_log_decay(model):
    """Record the per-token log decay of every SSM mixer while inside.

    Yields a dict ``{layer index: [float32 CPU tensor [B, T, H], ...]}`` (one entry per chunked call
    of that layer, i.e. per forward over more than one token).
    """
    records: dict[int, list[torch.Tensor]] = {}
    current = {"layer": None}
    handles = []
    for idx, mixer in ssm_mixers(model):
        handles.append(mixer.register_forward_pre_hook(lambda _m, _a, i=idx: current.update(layer=i)))
    saved = []

    def wrap(fn, family):
        def recorder(*args, **kwargs):
            if family == "gdn":
                g = kwargs["g"] if "g" in kwargs else args[3]
            else:
                names = ("hidden_states", "dt", "A", "B", "C", "chunk_size")
                a = dict(zip(names, args)) | kwargs
                g = _mamba2_log_decay(**{k: v for k, v in a.items() if k in ("dt", "A", "dt_bias", "dt_softplus",
                                                                             "dt_limit")})
            records.setdefault(current["layer"], []).append(g.detach().float().cpu())
            return fn(*args, **kwargs)
        return recorder

    try:
        for mod, name, family in _chunk_functions():
            fn = getattr(mod, name)
            saved.append((mod, name, fn))
            setattr(mod, name, wrap(fn, family))
        yield records
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        for h in handles:
            h.remove()


def _quantiles(x: torch.Tensor, qs=(0.1, 0.5, 0.9)) -> list[float]:
    x = x.flatten().double()
    if x.numel() > 1 << 24:   # torch.quantile's input limit: an even subsample
        x = x[:: math.ceil(x.numel() / (1 << 24))]
    return torch.quantile(x, torch.tensor(qs, dtype=torch.float64)).tolist()


@torch.no_grad()
def decay_table(model, windows: torch.Tensor, batch_size: int = 8, device=None, span: int = SPAN) -> pd.DataFrame:
    """Per SSM layer and head: quantiles (10/50/90%) of the per-token decay and of the ``span``-step
    cumulative decay over every position (and every ``span``-long run of positions) of ``windows``.

    Columns: layer, head, decay_p10, decay_p50, decay_p90, decay{span}_p10/_p50/_p90, half_life
    (tokens for the state to halve at the median per-token decay; inf for decay 1).
    """
    device = device or next(model.parameters()).device
    model.eval()
    per_layer: dict[int, list[torch.Tensor]] = {}
    with record_log_decay(model) as rec:
        for i in range(0, len(windows), batch_size):
            model(input_ids=windows[i:i + batch_size].to(device), use_cache=False)
            for k, v in rec.items():
                per_layer.setdefault(k, []).extend(v)
            rec.clear()
    rows = []
    for layer in sorted(per_layer):
        g = torch.cat(per_layer[layer])                                  # [N, T, H] log decay
        c = F.pad(g.double().cumsum(1), (0, 0, 1, 0))                    # c[:, t] = sum of g before t
        g_span = c[:, span:] - c[:, :-span]                              # [N, T - span + 1, H]
        for h in range(g.shape[-1]):
            d = _quantiles(g[..., h].exp())
            ds = _quantiles(g_span[..., h].exp())
            med_log = float(torch.quantile(g[..., h].flatten().double()[:1 << 24], 0.5))
            rows.append({"layer": layer, "head": h, "decay_p10": d[0], "decay_p50": d[1], "decay_p90": d[2],
                         f"decay{span}_p10": ds[0], f"decay{span}_p50": ds[1], f"decay{span}_p90": ds[2],
                         "half_life": math.inf if med_log >= 0 else math.log(0.5) / med_log})
    return pd.DataFrame(rows)


def _cache_kw(model) -> str:
    from .decode import _forward_kwargs

    return _forward_kwargs(model)[0]


@torch.no_grad()
def continue_with_reset(model, prefix: torch.Tensor, rest: torch.Tensor, reset: bool) -> torch.Tensor:
    """Logits float32 ``[B, R, vocab]`` of ``rest`` (int64 ``[B, R]``) after ``prefix`` (``[B, t]``),
    run through the model's cache; with ``reset`` every SSM layer's recurrent state is zeroed
    between the two (attention KV caches and conv states kept)."""
    dev = next(model.parameters()).device
    kw = _cache_kw(model)
    out = model(input_ids=prefix.to(dev), use_cache=True)
    cache = getattr(out, kw)
    if reset:
        for idx, _ in ssm_mixers(model):
            cache.layers[idx].recurrent_states[0].zero_()
    return model(input_ids=rest.to(dev), use_cache=True, **{kw: cache}).logits.float()


def _nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.transpose(1, 2), targets.to(logits.device), reduction="none").cpu()


@torch.no_grad()
def state_reset_ablation(model, windows: torch.Tensor, t: int, batch_size: int = 8,
                         bins=RESET_BINS) -> pd.DataFrame:
    """Bits per byte at each distance bin after position ``t``, with and without the state reset.

    ``windows`` int64 ``[n, W]`` with ``W > t + bins[-1]``; the reset happens after the model read
    bytes ``0..t-1``; position ``t + d`` (predicting byte ``t + d + 1``) is at distance ``d``.
    Returns one row per bin: distance_from, distance_to, bpb_kept, bpb_reset, delta_bpb (reset - kept).
    """
    W = windows.shape[1]
    if W <= t + bins[-1] + 1 or t < 1:
        raise ValueError(f"state_reset_ablation: windows of {W} bytes are too short for t={t} and distance {bins[-1]}")
    model.eval()
    kept, reset = [], []
    for i in range(0, len(windows), batch_size):
        w = windows[i:i + batch_size]
        prefix, rest, tgt = w[:, :t], w[:, t:-1], w[:, t + 1:]
        kept.append(_nll(continue_with_reset(model, prefix, rest, False), tgt))
        reset.append(_nll(continue_with_reset(model, prefix, rest, True), tgt))
    kept, reset = torch.cat(kept), torch.cat(reset)                  # [n, W - t - 1], index = distance
    rows = []
    for a, b in zip(bins[:-1], bins[1:]):
        k, r = float(kept[:, a:b].mean()) / LN2, float(reset[:, a:b].mean()) / LN2
        rows.append({"distance_from": a, "distance_to": b, "bpb_kept": k, "bpb_reset": r, "delta_bpb": r - k})
    return pd.DataFrame(rows)


@torch.no_grad()
def recall_with_reset(model, tasks: list[dict], reset: bool = True, add_bos: bool = True) -> pd.DataFrame:
    """Recall exact match (teacher-forced argmax of the value and its newline, as
    :func:`~.training.evaluate.recall_accuracy`) when every SSM state is zeroed just before the
    query line (``"\\n?key="``) of each instance; with ``reset=False`` the same split without the reset.

    One instance at a time (no padding inside the cache). Returns rows: distance, correct, prediction
    (the argmax bytes at the answer positions).
    """
    model.eval()
    rows = []
    for task in tasks:
        p = ([BOS_ID] if add_bos else []) + list(task["prompt"].encode())
        q = len(task["prompt"]) - task["prompt"].rindex("\n")          # query line bytes incl. its newline
        seq = torch.tensor([p + list(task["target"].encode()) + [10]])
        cut = len(p) - q
        logits = continue_with_reset(model, seq[:, :cut], seq[:, cut:-1], reset)
        pred = logits.argmax(-1).cpu()[0, q - 1:]
        rows.append({"distance": task["distance"], "correct": bool((pred == seq[0, len(p):]).all()),
                     "prediction": bytes(int(t) for t in pred if t < 256).decode("utf-8", "replace")})
    return pd.DataFrame(rows)


def heads_remembering(table: pd.DataFrame, threshold: float = 0.9, span: int = SPAN) -> float:
    """Fraction of heads whose median ``span``-step cumulative decay is >= ``threshold``."""
    return float((table[f"decay{span}_p50"] >= threshold).mean()) if len(table) else float("nan")



def measure_folder(folder, data_dir=None, device=None, reset_at: int = 2048, n_windows: int = 32,
                   decay_window: int = 2048, n_recall: int = 128, batch_size: int = 8, progress: bool = True) -> dict:
    """Measure the memory of a model folder in fp32 and write ``memory.json`` and ``decay.csv`` into it.

    Decay on ``n_windows`` held-out windows of ``decay_window`` bytes; the state reset at
    ``reset_at`` on ``n_windows`` windows of ``reset_at + RESET_BINS[-1] + 2`` bytes; for a model
    trained on the recall family, the recall exact match with and without a state reset before the
    query on ``n_recall`` held-out instances, by distance quartile. Returns the memory.json dict.
    """
    import json
    import time
    from pathlib import Path

    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM

    from .gutenberg import heldout_books, read_books
    from .synthetic_tasks import heldout_recall_tasks
    from .training.data import heldout_windows
    from .training.evaluate import accuracy_by_quartile, add_quartiles
    from .training.loop import task_family_of

    folder = Path(folder)
    t0 = time.time()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    books = read_books(heldout_books(data_dir))
    decay = decay_table(model, heldout_windows(books, decay_window, n_windows), batch_size, device)
    decay.to_csv(folder / "decay.csv", index=False)
    reset = state_reset_ablation(model, heldout_windows(books, reset_at + RESET_BINS[-1] + 2, n_windows), reset_at,
                                 batch_size)
    res = {"model": folder.name, "dtype": "float32", "span": SPAN, "decay_windows": int(n_windows),
           "decay_window_bytes": decay_window, "heads": int(len(decay)),
           "heads_median_decay16_ge_0.9": heads_remembering(decay, 0.9),
           "reset_at": reset_at, "reset": reset.to_dict(orient="records")}
    if task_family_of(folder) == "recall":
        tasks = heldout_recall_tasks(n_recall)
        rows = []
        for reset_state in tqdm((False, True), desc="recall reset", disable=not progress, leave=False):
            q = accuracy_by_quartile(add_quartiles(recall_with_reset(model, tasks, reset_state), "distance"), "distance")
            q.insert(0, "state", "reset before query" if reset_state else "kept")
            rows += q.to_dict(orient="records")
        res["recall_reset"] = rows
    res["seconds"] = round(time.time() - t0, 1)
    (folder / "memory.json").write_text(json.dumps(res, indent=1, default=str))
    return res


#: the files of a model folder the one-line memory summary reads (written by ``train-demo --memory``)
MEMORY_FILES = ("memory.json", "decay.csv")


def memory_summary(folder) -> str | None:
    """One sentence on how far the SSM states of the model in ``folder`` remember, from its stored
    measurement (:data:`MEMORY_FILES`); None when the folder has none.

    Medians over heads of each head's median per-token decay and half-life (bytes = tokens for the
    byte-level models), the share of heads whose median 16-step decay is >= 0.9, and the bits/byte
    change of the state-reset ablation at +256..512 bytes.
    """
    import json
    from pathlib import Path

    folder = Path(folder)
    if not all((folder / f).is_file() for f in MEMORY_FILES):
        return None
    m = json.loads((folder / "memory.json").read_text())
    d = pd.read_csv(folder / "decay.csv")
    span = int(m.get("span", SPAN))
    text = (f"median per-token decay {d['decay_p50'].median():.4f} and half-life {d['half_life'].median():,.0f} "
            f"tokens (median head); {heads_remembering(d, span=span):.0%} of {len(d)} SSM heads keep "
            f">= 0.9 of their state over {span} tokens")
    reset = [r for r in m.get("reset", []) if r["distance_from"] == 256]
    if reset:
        text += (f"; zeroing the states at t={m['reset_at']} changes bits/byte by {reset[0]['delta_bpb']:+.4f} "
                 f"at t+256..{reset[0]['distance_to']}")
    return text + f" (held-out books, {m.get('dtype', 'fp32')}; {folder.name}/memory.json)"


def model_card(model, source: str | None = None) -> str:
    """One line on what ``model`` is and how far its state remembers (the KL report's 'About the model').

    Args:
        model: a loaded ``*ForCausalLM`` of a supported family.
        source: its folder, if any; a stored memory measurement there is summarised
            (:func:`memory_summary`), otherwise the line says it was not measured.
    """
    from pathlib import Path

    from .models.configs import layer_kinds

    cfg = model.config
    params = sum(p.numel() for p in model.parameters()) / 1e6
    try:
        kinds = layer_kinds(cfg)
        letters = {"ssm": ("S", "SSM"), "attention": ("A", "attention"), "mlp": ("-", "MLP"), "moe": ("E", "MoE")}
        layout = "".join(letters.get(k, ("?",))[0] for k in kinds)
        legend = ", ".join(f"{letters[k][0]} = {letters[k][1]}" for k in letters if k in kinds)
        layers = f"{len(kinds)} layers {layout} ({legend})"
    except (AttributeError, KeyError):
        layers = f"{getattr(cfg, 'num_hidden_layers', '?')} layers"
    name = (cfg.architectures or [type(model).__name__])[0] if getattr(cfg, "architectures", None) else type(model).__name__
    mem = memory_summary(source) if source and Path(source).is_dir() else None
    return (f"{name} ({cfg.model_type}), {params:.2f}M parameters, {layers}; state memory: "
            + (mem or "not measured (`replayssm-quant train-demo --memory FOLDER` writes memory.json for a "
                      "model folder)") + ".")
