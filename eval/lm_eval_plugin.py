"""The ``replayssm`` model for lm-evaluation-harness 0.4.x.

Every request runs through the quantized decode path of
:class:`replayssm_quant.eval.decode.DecodeSession`: the prompt / context is
prefilled by the model's own fp32 path, then every generated or scored token
is stepped through the SSM state cache in the chosen state format. (A
full-sequence forward would bypass the state format and measure nothing.)

model_args::

    pretrained=PATH_OR_ID|gdn-demo|mamba2-demo   model folder, hub id or embedded model name
    state=SPEC           state spec (fp32, nvfp4+sr, nvfp4/fp8+sr, ...); a ``MODE:`` prefix
                         (conventional:fp8+sr) overrides ``mode``, a window of its own (replay@8:nvfp4+sr)
                         ``window`` (another explicit window than 16 beside it is an error)
    mode=replay|conventional   decode mode (default replay)
    window=16            replay window L
    draft=none           speculative generation: ngram:T[:N] verifies T tokens per model step (the last
                         accepted token + up to T-1 drafts from n-gram matching in the prompt and the text so
                         far; greedy acceptance, the same tokens as plain greedy decoding); T <= window
    seed=0               stochastic-rounding seed
    batch_size=1         rows per decode batch (one row = one request); "auto" (or lm-eval's "auto:N") =
                         max_batch_size or 64;
                         wins over lm-eval's --batch_size (which is used when model_args has none)
    max_batch_size=64    used by batch_size=auto
    max_batch_tokens=65536  token budget of a batch: rows x (longest prompt of the batch + max_gen_toks)
                         for generation, rows x (longest context + continuation) for loglikelihood
                         stays <= this (besides <= batch_size rows); a request over the budget runs
                         alone. 0 or none = no budget (rows limited by batch_size only)
    device=cuda|cpu      default: cuda when available. Beside lm-eval's --device (default cuda:0) the
                         model_args value wins; lm-eval's device falls back to cpu (one-line notice)
                         when no GPU is visible, a cuda device in model_args is then an error
    dtype=auto           model weights dtype: auto (the checkpoint's), bfloat16, float16 or float32;
                         the SSM states, the fp32 reference's included, stay float32
    backend=triton|torch cache kernels (default: triton on CUDA, torch on CPU)
    parallelize=false    spread the model over the visible GPUs (device_map=auto)
    max_length=N         context limit (default: the model's max_position_embeddings, else 4096):
                         loglikelihood_rolling windows as lm-eval's hf model cuts them; for loglikelihood and
                         generate_until only the context is cut to its last max_length tokens, the continuation
                         or the generated tokens come on top (lm-eval's hf model keeps max_length in all)
    add_bos_token=false  prepend the tokenizer's bos token to every context

Registration: importing this module registers ``replayssm`` in lm-eval's model
registry (``@register_model``). The package also declares the
``lm_eval.models`` entry point for lm-eval versions that read entry points;
lm-eval 0.4.13 does not, so a regular install (wheel, ``pip install .``) also
ships ``replayssm_quant_lm_eval.pth``, whose start-up hook
(:mod:`replayssm_quant._lm_eval_autoregister`) registers ``replayssm`` as a lazy
placeholder for this class when lm-eval's registry is imported: the bare
``lm_eval --model replayssm ...`` works. The same hook (and this module, when imported) adds the
packaged task folder (``replayssm_copy``, ``replayssm_upper``, tag ``replayssm_synth``; ``replayssm_count``,
``replayssm_recall``, tag ``replayssm_long``) to the
include paths of lm-eval's TaskManager, so ``--tasks replayssm_copy`` needs no ``--include_path``. ``replayssm-lm-eval [lm-eval args]``
(= ``python -m replayssm_quant.eval.lm_eval_plugin``: lm-eval's own CLI with this
module imported first) is the equivalent wrapper; editable installs get no
``.pth``, so there use the wrapper, or import this module before calling
lm-eval from Python.

Generation is greedy (``do_sample=True`` is an error). A row stops at the
tokenizer's eos, at any ``until`` string, or after ``max_gen_toks`` tokens;
the returned text is cut before the first ``until`` string (lm-eval's
convention). Chat templates (``--apply_chat_template``) are not supported.

Scores against lm-eval's ``hf`` model (README): with ``state=fp32`` and float32 weights the log-likelihoods are
those of a full forward up to float32 rounding, but Mamba-2 (Nemotron-H) ones: transformers clamps dt to
``time_step_min`` in its chunked (prefill) path and not in its one-token step, and the plugin steps every scored
token as a decode does (the numbers of transformers' own step-by-step decoding).

Batching: requests are sorted longest first (generation: within groups of equal
stop settings; loglikelihood: within groups of equal continuation length) and cut
into batches of at most ``batch_size`` rows and ``max_batch_tokens`` padded tokens
(see the model_args above), so one prefill never holds 128 prompts of 2,000 tokens.
Results come back in the order of the requests (lm-eval's contract). Rows are
independent (left padding is masked): on the tiny test models the batching changes
no generated token, and an fp32 log-likelihood only by float32 rounding (the
model's own matmuls round differently in other batch shapes). Stochastic-rounding
draws are keyed by a row's slot in its batch, so ``+sr`` results depend on the
batching (as they always did on ``batch_size``).

Every generate_until request is recorded in
:attr:`ReplaySSMLM.generation_log` (context, generated token ids and their
count), which the downstream runner uses for the generation-length quartiles.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import torch
import lm_eval.models  # noqa: F401  (lm-eval's own model table first: registering into an empty
#                          registry would hide hf, vllm, ... from `replayssm-lm-eval --model hf`)
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import simple_parse_args_string
from tqdm import tqdm

from replayssm_quant import _lm_eval_autoregister
from replayssm_quant.quant.philox import check_seed
from replayssm_quant.quant.spec import DEFAULT_WINDOW

log = logging.getLogger(__name__)

#: generation keyword arguments the plugin understands (others are ignored with a warning)
_GEN_KEYS = {"until", "max_gen_toks", "do_sample", "temperature"}
DEFAULT_MAX_GEN_TOKS = 256
#: decode steps between two host checks of the multi-token stop strings (each check syncs with the device)
STOP_CHECK_EVERY = 8
#: default token budget of one decode batch (model_arg max_batch_tokens; see the module doc)
DEFAULT_MAX_BATCH_TOKENS = 65536


def _as_bool(x) -> bool:
    if isinstance(x, bool):
        return x
    if isinstance(x, str) and x.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return x.strip().lower() in ("true", "1", "yes")
    if isinstance(x, int):
        return bool(x)
    raise ValueError(f"expected a boolean (true/false), got {x!r}")


def _as_int(name: str, x, lo: int = 1) -> int:
    """An integer model_arg (lm-eval passes them as strings or as the ints, floats and bools it parsed them to):
    ``x`` if it is an integer >= ``lo``, else ValueError. A bool is refused (``seed=True`` is no seed)."""
    if isinstance(x, bool):
        raise ValueError(f"{name} must be an integer >= {lo}, got {x!r}")
    try:
        v = int(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer >= {lo}, got {x!r}") from None
    if v < lo or (isinstance(x, float) and x != v):
        raise ValueError(f"{name} must be an integer >= {lo}, got {x!r}")
    return v


def _as_budget(name: str, x) -> int | None:
    """A token budget: an integer >= 1, or None for 0 / 'none' / None (no budget)."""
    if x is None or (isinstance(x, str) and x.strip().lower() == "none"):
        return None
    if isinstance(x, bool):
        raise ValueError(f"{name} must be an integer >= 0 (0 or 'none' = no budget), got {x!r}")
    try:
        v = _as_int(name, x, lo=0)
    except ValueError:
        raise ValueError(f"{name} must be an integer >= 0 (0 or 'none' = no budget), got {x!r}") from None
    return v or None


def load_model_and_tokenizer(pretrained: str, device: str, dtype="float32", device_map: str | None = None):
    """``(model, tokenizer)`` for a model folder, hub id, embedded name (gdn-demo, mamba2-demo)
    or tiny random model (tiny-ARCH), through :func:`replayssm_quant.eval.adapters.loading.load_model`."""
    from replayssm_quant.eval.adapters.loading import load_model

    loaded = load_model(pretrained, device=device, device_map=device_map, dtype=dtype)
    return loaded.model, loaded.tokenizer


#: the name of the device lm-eval passes beside model_args: its --device, whose default is cuda:0
_LM_EVAL_DEVICE = "device"
#: main modules / scripts that are lm-eval's command line (there a bad model_args is a one-line error)
_CLI_MAIN_MODULES = ("lm_eval.__main__", "lm_eval", "replayssm_quant.eval.lm_eval_plugin")
_CLI_SCRIPTS = ("lm_eval", "lm-eval", "replayssm-lm-eval")


def _running_lm_eval_cli() -> bool:
    """Whether this process is lm-eval's command line (``lm_eval``, ``python -m lm_eval``,
    ``replayssm-lm-eval``) rather than a Python program calling lm-eval."""
    import os
    import sys

    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name in _CLI_MAIN_MODULES:
        return True
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return spec_name is None and argv0.removesuffix(".exe") in _CLI_SCRIPTS


def _is_cuda(device) -> bool:
    return str(device).strip().lower().startswith("cuda")


def _check_device(device: str | None) -> str:
    """The device to run on (:func:`.placement.resolve_device`): ``device`` as given, checked, or for None cuda
    when a GPU is visible and cpu otherwise."""
    from .placement import resolve_device

    try:
        return resolve_device(device)
    except ValueError as e:
        raise ValueError(f"replayssm: device={str(device).strip()}: {e} (device=cpu, or leave device unset)") from None


def model_kwargs(model_args: dict, additional_config: dict | None = None) -> dict:
    """The keyword arguments of :class:`ReplaySSMLM` from lm-eval's two sources.

    ``model_args`` (``--model_args``) win: a key also in ``additional_config`` (lm-eval's own
    ``--device`` / ``--batch_size`` / ``--max_batch_size``, passed by every lm-eval 0.4.x code
    path) is dropped from the latter, so the two never collide. lm-eval's device (its default is
    cuda:0 even on a machine without a GPU) falls back to cpu with a one-line notice when no GPU
    is visible; a CUDA device named in model_args is kept (and is an error there).
    """
    args = dict(model_args)
    extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in args}
    dev = extra.get(_LM_EVAL_DEVICE)
    if dev is not None and _is_cuda(dev) and not torch.cuda.is_available():
        log.warning("replayssm: no CUDA GPU visible: running on cpu instead of lm-eval's device %s "
                    "(put device=cuda in model_args to require a GPU)", dev)
        extra[_LM_EVAL_DEVICE] = "cpu"
    return {**args, **extra}


@register_model("replayssm")
class ReplaySSMLM(TemplateLM):
    """lm-eval model whose SSM decode steps run through a quantized state cache (see module doc)."""

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        """lm-eval's factory for a ``key=value,...`` model_args string (the CLI of lm-eval < 0.4.9,
        ``simple_evaluate(model_args="...")``); see :func:`model_kwargs` for the merge."""
        return cls._create(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """lm-eval's factory for a model_args dict (the CLI of lm-eval 0.4.9+, which parses
        ``--model_args`` into a dict, and ``simple_evaluate(model_args={...})``)."""
        return cls._create(dict(arg_dict or {}), additional_config)

    @classmethod
    def _create(cls, args: dict, additional_config: dict | None):
        try:
            return cls(**model_kwargs(args, additional_config))
        except ValueError as exc:
            if _running_lm_eval_cli():  # a user error on the command line: one line, no traceback
                raise SystemExit(f"error: {exc}") from None
            raise

    def __init__(self, pretrained: str | None = None, state: str = "fp32", mode: str = "replay",
                 window: int = DEFAULT_WINDOW, seed: int = 0, batch_size: int | str = 1,
                 max_batch_size: int | None = None,
                 max_batch_tokens: int | str | None = DEFAULT_MAX_BATCH_TOKENS, device: str | None = None,
                 dtype: str = "auto", backend: str | None = None,
                 max_length: int | None = None, add_bos_token: bool | str = False,
                 max_gen_toks: int = DEFAULT_MAX_GEN_TOKS, parallelize: bool | str = False, model=None,
                 tokenizer=None, draft: str | None = None, **kwargs: Any):
        super().__init__()
        from replayssm_quant.eval.decode import DecodeSession, parse_variant

        unknown = sorted(k for k in kwargs if k != "trust_remote_code")
        if unknown:
            raise ValueError(
                f"replayssm: unknown model_args {unknown}; known: pretrained, state, mode, window, seed, "
                "batch_size, max_batch_size, max_batch_tokens, device, dtype, backend, max_length, add_bos_token, "
                "max_gen_toks, parallelize, draft")
        if pretrained is None and model is None:
            raise ValueError("replayssm: model_args needs pretrained=PATH_OR_ID (or gdn-demo / mamba2-demo)")
        self.variant = parse_variant(str(state), default_mode=str(mode))
        self.window = _as_int("window", window)
        if self.variant.window and self.window not in (DEFAULT_WINDOW, self.variant.window):
            raise ValueError(f"replayssm: state={state} carries its own window L={self.variant.window}, and "
                             f"window={self.window} asks for another: give one of them")
        self.seed = check_seed(_as_int("seed", seed, lo=0))   # (its range: checked here, not at the first request)
        self.max_batch_size = _as_int("max_batch_size", max_batch_size) if max_batch_size is not None else 64
        auto = isinstance(batch_size, str) and batch_size.strip().lower().startswith("auto")
        if auto and not re.fullmatch(r"auto(:[1-9][0-9]*)?", batch_size.strip().lower()):
            raise ValueError(f"batch_size must be an integer >= 1, auto or auto:N, got {batch_size!r}")
        if auto:
            self.batch_size = self.max_batch_size
        else:
            self.batch_size = _as_int("batch_size", batch_size)
        #: token budget of one batch (None: rows limited by batch_size only)
        self.max_batch_tokens = _as_budget("max_batch_tokens", max_batch_tokens)
        self.max_gen_toks = _as_int("max_gen_toks", max_gen_toks)
        self.add_bos_token = _as_bool(add_bos_token)
        from .adapters.dtypes import parse_weight_dtype

        try:
            tdtype = parse_weight_dtype(dtype)
        except ValueError as e:
            raise ValueError(f"replayssm: {e}") from None
        dev = _check_device(device)
        self._device = torch.device(dev)
        if backend == "triton":       # before the model loads (not at the first request)
            from replayssm_quant.kernels.launch import check_device_formats

            check_device_formats(self._device, (self.variant.spec.recur.name, self.variant.spec.read.name),
                                 "replayssm: backend=triton")
        if model is None:
            try:
                model, tokenizer = load_model_and_tokenizer(str(pretrained), dev, tdtype,
                                                            "auto" if _as_bool(parallelize) else None)
            except ValueError as e:   # the loader's words are the replayssm-quant command line's
                raise ValueError(f"replayssm: pretrained={pretrained}: "
                                 + str(e).replace("valid --model values", "valid pretrained= values")) from None
        elif tokenizer is None:
            raise ValueError("replayssm: a model object needs its tokenizer too")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.pretrained = str(pretrained) if pretrained is not None else type(model).__name__
        if max_length is None:
            max_length = getattr(model.config, "max_position_embeddings", None) or 4096
        self.max_length = _as_int("max_length", max_length, lo=2)
        from .drafting import parse_draft

        try:
            self.draft = parse_draft(draft)
        except ValueError as e:
            raise ValueError(f"replayssm: {e}") from None
        self.session = DecodeSession(self.model, [self.variant], window=self.window, seed=self.seed,
                                     backend=backend, draft=self.draft)
        #: one dict per generate_until request: context, until, token_ids, gen_tokens
        self.generation_log: list[dict] = []
        #: generated tokens and seconds spent in generation (prefill included), over all generate_until calls;
        #: with a draft also model steps (row-steps), drafted and accepted draft tokens
        self.generation_stats: dict = {"tokens": 0, "seconds": 0.0}
        if self.draft is not None:
            self.generation_stats.update(steps=0, drafted=0, accepted=0)

    # ------------------------------------------------------------------ lm-eval plumbing
    @property
    def eot_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise ValueError("replayssm: the tokenizer has no eos token")
        return eos

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    @property
    def device(self):
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return getattr(self.tokenizer, "name_or_path", "tokenizer").replace("/", "__")

    def generation_summary(self) -> dict:
        """``{"tokens", "seconds", "tokens_per_s"}`` of every ``generate_until`` call so far (prefill included;
        ``tokens_per_s`` None before any generation)."""
        g = dict(self.generation_stats)
        g["tokens_per_s"] = g["tokens"] / g["seconds"] if g["seconds"] > 0 else None
        return g

    def get_model_info(self) -> dict:
        """What lm-eval writes into its results' ``config`` (it asks after the evaluation): the settings, the weights'
        dtype and the generation speed (``generation_tokens_per_s``)."""
        from .adapters.dtypes import weights_dtype

        gen = self.generation_summary()
        return {"model_pretrained": self.pretrained, "state": self.variant.spec.text,
                "mode": self.variant.mode, "window": self.variant.window or self.window, "seed": self.seed,
                "model_device": str(self.device), "model_batch_size": self.batch_size,
                "weights_dtype": weights_dtype(self.model), "generation_tokens": gen["tokens"],
                "generation_seconds": gen["seconds"], "generation_tokens_per_s": gen["tokens_per_s"],
                "draft": self.draft.text if self.draft is not None else "none"}

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        ids = self.tokenizer.encode(string, add_special_tokens=False)
        if self.add_bos_token if add_special_tokens is None else add_special_tokens:
            bos = self.tokenizer.bos_token_id
            if bos is not None and (not ids or ids[0] != bos):
                ids = [bos] + ids
        return ids

    def tok_decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ------------------------------------------------------------------ batching helpers
    def _pad_left(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """int64 ``[D, P]`` left-padded ids and an attention mask (None when lengths are equal)."""
        P = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id
        pad = self.eot_token_id if pad is None else pad
        ids = torch.full((len(seqs), P), pad, dtype=torch.int64)
        mask = torch.zeros((len(seqs), P), dtype=torch.int64)
        for i, s in enumerate(seqs):
            ids[i, P - len(s):] = torch.tensor(s, dtype=torch.int64)
            mask[i, P - len(s):] = 1
        return ids, (None if bool(mask.all()) else mask)

    def _batches(self, items: list, lengths: list[int]):
        """Consecutive slices of ``items`` (sorted longest first by the caller): at most
        ``batch_size`` rows and, with a budget, rows x max(``lengths`` of the slice) <=
        ``max_batch_tokens``; a single item over the budget is a batch of its own (never dropped).

        ``lengths[j]`` is item j's padded cost per row: prompt + max new tokens, or context +
        continuation. The items keep their order, so the caller maps results back by index.
        """
        budget, i, n = self.max_batch_tokens, 0, len(items)
        while i < n:
            j, longest = i + 1, lengths[i]
            while j < n and j - i < self.batch_size:
                longest_j = max(longest, lengths[j])
                if budget is not None and (j - i + 1) * longest_j > budget:
                    break
                j, longest = j + 1, longest_j
            yield items[i:j]
            i = j

    # ------------------------------------------------------------------ loglikelihood
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """Teacher-forced continuation log-probs: context prefilled in fp32, continuation stepped
        through the quantized state. Batches group equal continuation lengths, longest context first,
        within ``batch_size`` rows and the ``max_batch_tokens`` budget (context + continuation)."""
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        items = []
        for i, (_, ctx, cont) in enumerate(requests):
            if not cont:
                raise ValueError(f"replayssm: loglikelihood request {i} has an empty continuation")
            ctx = list(ctx)[-self.max_length:] if len(ctx) > self.max_length else list(ctx)
            items.append((i, ctx, list(cont)))
        # longest first, equal continuation lengths together
        items.sort(key=lambda t: (-len(t[2]), -len(t[1])))
        groups: dict[int, list] = {}
        for it in items:
            groups.setdefault(len(it[2]), []).append(it)
        pbar = tqdm(total=len(items), desc="replayssm loglikelihood", disable=disable_tqdm)
        for n_cont, group in groups.items():
            for chunk in self._batches(group, [len(c) + n_cont for _, c, _ in group]):
                ids, mask = self._pad_left([c for _, c, _ in chunk])
                cont = torch.tensor([c for _, _, c in chunk], dtype=torch.int64)
                lp, greedy = self.session.loglikelihood(ids, cont, mask)
                for (i, _, _), v, g in zip(chunk, lp.tolist(), greedy.tolist()):
                    results[i] = (float(v), bool(g))
                    if self.cache_hook is not None:
                        self.cache_hook.add_partial("loglikelihood", requests[i][0], results[i])
                pbar.update(len(chunk))
        pbar.close()
        return results  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Whole-document log-likelihood in windows of ``max_length`` tokens (lm-eval's rolling windows)."""
        from lm_eval import utils

        windows, owner = [], []
        for i, req in enumerate(requests):
            (string,) = req.args
            toks = self.tok_encode(string, add_special_tokens=False)
            for ctx, cont in map(utils.make_disjoint_window, utils.get_rolling_token_windows(
                    token_list=toks, prefix_token=self.prefix_token_id, max_seq_len=self.max_length,
                    context_len=1)):
                windows.append(((None, None), ctx, cont))
                owner.append(i)
        scores = self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)
        totals = [0.0] * len(requests)
        for i, (lp, _) in zip(owner, scores):
            totals[i] += lp
        for req, t in zip(requests, totals):
            if self.cache_hook is not None:
                self.cache_hook.add_partial("loglikelihood_rolling", req.args, t)
        return totals

    # ------------------------------------------------------------------ generation
    def _gen_settings(self, gen_kwargs: dict) -> tuple[tuple[str, ...], int]:
        kw = dict(gen_kwargs or {})
        temp = kw.get("temperature", 0.0) or 0.0
        if _as_bool(kw.get("do_sample", False)) or ("do_sample" not in kw and float(temp) > 0):
            raise ValueError(f"replayssm: the plugin decodes greedily; sampling (do_sample={kw.get('do_sample')}, "
                             f"temperature={temp}) is not supported")
        extra = sorted(set(kw) - _GEN_KEYS)
        if extra:
            log.warning("replayssm: ignoring generation kwargs %s (greedy decoding)", extra)
        until = kw.get("until", None) or []
        if isinstance(until, str):
            until = [until]
        if not isinstance(until, (list, tuple)) or not all(isinstance(u, str) and u for u in until):
            raise ValueError(f"replayssm: 'until' must be a string or a list of non-empty strings, got {until!r}")
        max_gen = _as_int("max_gen_toks", kw.get("max_gen_toks", self.max_gen_toks))
        return tuple(until), max_gen

    def _stop_setup(self, until: tuple[str, ...]):
        """Stop token ids (eos and single-token until strings) and a host stop check for the rest."""
        stop_ids = {self.eot_token_id}
        multi = []
        for u in until:
            ids = self.tokenizer.encode(u, add_special_tokens=False)
            if len(ids) == 1 and self.tok_decode(ids) == u:
                stop_ids.add(ids[0])
            else:
                multi.append(u)
        if not multi:
            return stop_ids, None
        # a stop string of b bytes spans at most b (+ a partial character) tokens, and it may have ended up to
        # the tokens of one check interval (or one verify step) before the check
        since_check = max(STOP_CHECK_EVERY, self.draft.tokens if self.draft is not None else 1)
        tail = max(len(u.encode()) for u in multi) + 4 + since_check

        def stop_fn(_row: int, toks: list[int]) -> bool:
            text = self.tok_decode(toks[-tail:] if len(toks) > tail else toks)
            return any(u in text for u in multi)
        return stop_ids, stop_fn

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy generation, batched across requests.

        Requests with equal stop settings are batched together, longest context first, at most
        ``batch_size`` rows and ``max_batch_tokens`` of rows x (longest prompt + max_gen_toks) per batch.
        """
        out: list[str | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        enc: list[list[int]] = []
        for i, req in enumerate(requests):
            ctx, gen_kwargs = req.args
            groups.setdefault(self._gen_settings(gen_kwargs), []).append(i)
            enc.append(self.tok_encode(ctx))
        pbar = tqdm(total=len(requests), desc=f"replayssm generate ({self.variant.label})", disable=disable_tqdm)
        for (until, max_gen), idx in groups.items():
            idx.sort(key=lambda i: -len(enc[i]))
            stop_ids, stop_fn = self._stop_setup(until)
            # the prompt as prefilled: the last max_length tokens, an empty one as the prefix token
            prompt = {i: enc[i][-self.max_length:] or [self.prefix_token_id] for i in idx}
            for chunk in self._batches(idx, [len(prompt[i]) + max_gen for i in idx]):
                seqs = [prompt[i] for i in chunk]
                ids, mask = self._pad_left(seqs)
                t0 = time.perf_counter()
                rows = self.session.generate(ids, max_gen, attention_mask=mask, stop_token_ids=stop_ids,
                                             stop_fn=stop_fn, check_every=STOP_CHECK_EVERY)
                if self._device.type == "cuda":
                    torch.cuda.synchronize(self._device)
                self.generation_stats["seconds"] += time.perf_counter() - t0
                self.generation_stats["tokens"] += sum(len(r) for r in rows)
                if self.draft is not None:
                    st = self.session.spec_stats
                    for key in ("steps", "drafted", "accepted"):
                        self.generation_stats[key] += getattr(st, key)
                for i, toks in zip(chunk, rows):
                    text = self.tok_decode(toks)  # eos is a special token: dropped here
                    for u in until:
                        text = text.split(u, 1)[0]
                    out[i] = text
                    ctx = requests[i].args[0]
                    self.generation_log.append({"context": ctx, "until": list(until), "token_ids": toks,
                                                "gen_tokens": len(toks)})
                    if self.cache_hook is not None:
                        self.cache_hook.add_partial("generate_until", requests[i].args, text)
                pbar.update(len(chunk))
        pbar.close()
        return out  # type: ignore[return-value]


# the packaged tasks (replayssm_copy, ...) by name in lm-eval's TaskManager, also without the .pth
# (editable installs, the replayssm-lm-eval wrapper); the model itself is registered above
_lm_eval_autoregister.install(ignore_env=True)


def main(argv: list[str] | None = None) -> None:
    """lm-eval's own command line with the ``replayssm`` model registered (this module imported)."""
    import sys

    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = [sys.argv[0]] + list(argv)
    try:
        cli_evaluate()
    except ValueError as e:   # the plugin's refusals at a request (e.g. do_sample=true): one line, no traceback
        if str(e).startswith("replayssm:"):
            raise SystemExit(f"error: {e}") from None
        raise


if __name__ == "__main__":  # pragma: no cover - exercised by the CLI test in a subprocess
    main()
