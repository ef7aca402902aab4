"""Quantized decoding sessions: a Hugging Face hybrid model whose SSM layers decode through
:class:`~replayssm_quant.kernels.state_cache.SSMStateCache`.

A *variant* is a state spec plus a decode mode (``[MODE:]SPEC``):

====================================  ==============================================
``nvfp4/fp8+sr``                      replay mode (default), separate checkpoints
``replay:nvfp4+sr``                   replay mode, shared NVFP4 checkpoint
``replay@4:nvfp4/fp8+sr``             replay mode with its own window L = 4
``conventional:fp8+sr``               conventional decoding, rounded every step
====================================  ==============================================

The mode prefix is optional (the default comes from ``default_mode``, the
window from the session's ``window``); conventional decoding takes shared
specs only.

One :class:`DecodeSession` runs several variants side by side on the same
model: with ``n`` variants and ``D`` prompts the model's batch has ``n * D``
rows, row ``r = i * D + d`` being prompt ``d`` under variant ``i``. Each SSM
layer holds one cache per variant (``D`` slots each). Attention layers, MLPs,
norms and the convolution states stay the model's own.

Typical use (the KL harness and the lm-eval plugin both do this)::

    s = DecodeSession(model, ["fp32", "nvfp4+sr", "nvfp4/fp8+sr"], window=16, seed=0)
    logits = s.prefill(prompt_ids)               # [n*D, vocab]: the fp32 model path, states loaded
    for t in range(N):
        logits = s.step(next_tokens)             # next_tokens [n*D] -> logits [n*D, vocab] fp32
    s.close()

or :meth:`DecodeSession.generate` (greedy, with stop tokens) and
:meth:`DecodeSession.loglikelihood` (teacher-forced continuation log-probs).

Chunked teacher forcing (DESIGN.md sec. 3): with ``exec_mode="chunked"`` (replay variants only),
:meth:`DecodeSession.feed` passes ``T`` known tokens per row through the model in one forward; inside
each SSM layer :func:`replayssm_quant.kernels.chunked.chunked_forward_many` computes the window outputs
from the read copy (every variant in one call) and flushes through the cache's own flush (same roundings,
same Philox counters as ``T`` calls of :meth:`DecodeSession.step`)::

    s = DecodeSession(model, ["fp32", "nvfp4/fp8+sr"], window=16, exec_mode="chunked")
    s.prefill(prompt_ids)
    logits = s.feed(next_tokens)                 # next_tokens [D, T] -> logits [n*D, T, vocab] fp32

Speculative decoding (Algorithm 2, DESIGN.md sec. 3): with ``draft="ngram:T"`` the caches get a draft
capacity of ``T`` tokens and :meth:`DecodeSession.generate` verifies up to ``T`` tokens per model forward
(drafts from prompt lookup, :mod:`.drafting`; greedy acceptance, :mod:`.speculative`). The primitives::

    s = DecodeSession(model, ["fp32", "nvfp4/fp8+sr"], draft="ngram:4")
    s.prefill(prompt_ids)
    logits = s.verify(tokens)                    # tokens [rows, T] -> logits [rows, T, vocab]: nothing committed
    s.accept(n)                                  # n int [rows] in 1..T: keep the first n[r] tokens of row r

:meth:`verify` runs the ``T`` tokens through the model in one forward, every SSM layer through
``SSMStateCache.verify`` (output only); :meth:`accept` commits ``n`` tokens per row in every SSM cache
(``SSMStateCache.commit``), rolls every short causal conv1d state back to its inputs up to the accepted
position and drops the rejected tokens from the attention layers' KV cache (rows that keep fewer tokens
than the longest-keeping row keep holes there, masked out of attention; positions stay each row's own).
In a draft session :meth:`step` is ``verify`` of one token plus ``accept(1)``.
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
from torch.profiler import record_function

from replayssm_quant.quant.philox import check_seed
from replayssm_quant.quant.spec import (DECODE_MODES, DEFAULT_WINDOW, StateSpec, check_mode, check_positive_int,
                                        parse_state_spec)

from .adapters import SUPPORTED_MODELS, ssm_layers
from .adapters.hooks import attach
from .attention import grouped_attention
from .placement import device_context, input_device
from .drafting import DraftSpec, parse_draft
from .speculative import cut_rows, speculative_generate


@dataclass(frozen=True)
class Variant:
    """A state spec with its decode mode."""

    spec: StateSpec
    mode: str = "replay"
    window: int | None = None  #: replay window of this variant (None: the session's)

    @property
    def label(self) -> str:
        """``nvfp4/fp8+sr`` (replay), ``replay@4:nvfp4/fp8+sr`` (own window), ``conventional:fp8+sr``."""
        if self.mode == "replay" and self.window is None:
            return self.spec.text
        return f"{self.mode}{'' if self.window is None else f'@{self.window}'}:{self.spec.text}"

    @property
    def slug(self) -> str:
        """File-name-safe label (``nvfp4-fp8+sr``, ``conventional-fp8+sr``)."""
        return self.label.replace("/", "-").replace(":", "-").replace("@", "L")

    @property
    def is_reference(self) -> bool:
        return self.spec.is_reference

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.label


VARIANT_FORMS = ("variant form: [MODE[@L]:]SPEC with MODE in {" + ", ".join(DECODE_MODES) + "} "
                 "(default replay) and L an optional replay window, e.g. nvfp4/fp8+sr, replay@8:nvfp4+sr, "
                 "conventional:fp8+sr")


def parse_variant(text: str | Variant, default_mode: str = "replay") -> Variant:
    """Parse ``[MODE[@L]:]SPEC`` into a :class:`Variant`; ``ValueError`` naming what is wrong otherwise."""
    if isinstance(text, Variant):
        return text
    check_mode(default_mode)
    if not isinstance(text, str):
        raise ValueError(f"state must be a string, got {type(text).__name__}; {VARIANT_FORMS}")
    mode, body, window = default_mode, text.strip(), None
    if ":" in body:
        mode, _, body = body.partition(":")
        mode = mode.strip().lower()
        if "@" in mode:
            mode, _, w = mode.partition("@")
            if not w.isdigit() or int(w) < 1:
                raise ValueError(f"bad window {w!r} in state {text!r} (a positive integer); {VARIANT_FORMS}")
            window = int(w)
            if mode != "replay":
                raise ValueError(f"state {text!r}: a window (@L) belongs to the replay mode only; {VARIANT_FORMS}")
        if mode not in DECODE_MODES:
            raise ValueError(f"unknown decode mode {mode!r} in state {text!r}; {VARIANT_FORMS}")
    spec = parse_state_spec(body)
    if mode == "conventional" and not spec.shared:
        raise ValueError(
            f"state {text!r}: conventional decoding keeps one state, so it takes a shared spec (FMT[+sr]), "
            f"not READ/RECUR; {VARIANT_FORMS}")
    return Variant(spec=spec, mode=mode, window=window)


#: how a session runs teacher-forced tokens: ``step`` (one model forward per token, the decode kernels
#: themselves), ``chunked`` (``T`` tokens per forward, replay variants only; DESIGN.md sec. 3) or
#: ``chunked-all`` (``T`` tokens per forward for every variant: conventional ones step their state token by
#: token inside each SSM layer, the same ``cache.step`` calls as the step path)
EXEC_MODES = ("step", "chunked", "chunked-all")


def check_exec_mode(exec_mode: str) -> str:
    """Return ``exec_mode`` if it is one of :data:`EXEC_MODES`; ``ValueError`` listing them otherwise."""
    if exec_mode not in EXEC_MODES:
        raise ValueError(f"unknown execution {exec_mode!r}; valid: {', '.join(EXEC_MODES)}")
    return exec_mode


def chunkable(variant: Variant) -> bool:
    """Whether chunked teacher forcing applies to ``variant``: replay mode (conventional decoding rounds
    the state every step, so it keeps the step path)."""
    return variant.mode == "replay"


def _forward_kwargs(model):
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache_params" if "cache_params" in params else "past_key_values"
    return cache_kw, "logits_to_keep" in params


@dataclass
class LayerGraph:
    """The CUDA graph of one SSM layer's call (a step or a feed's chunked windows, all variants) with its static
    buffers and the GPU it was captured on (the layer's: the graph replays there)."""

    key: tuple
    graph: object
    static_in: tuple
    static_out: torch.Tensor
    device: torch.device


def _roll_back_conv(layer_cache, accepted: torch.Tensor) -> None:
    """Conv states of one linear-attention cache layer after a verify of ``T`` tokens (recorded with
    ``activate_past_recording``: ``[rows, C, W + T]``, the ``W`` inputs before the verify then its ``T``) -> the
    ``W`` inputs ending at each row's last accepted token: columns ``accepted[r] .. accepted[r] + W - 1``.
    A state still ``W`` wide was updated in place by a one-token step (then every row accepted its one token)."""
    for i in range(layer_cache.number_of_states):
        st = layer_cache.conv_states[i]
        if st is not None and layer_cache.is_conv_states_initialized[i]:
            W = layer_cache.conv_kernel_size[i]
            if st.shape[-1] > W:
                cols = accepted.to(st.device)[:, None] + torch.arange(W, device=st.device)[None, :]   # [rows, W]
                st = st.gather(-1, cols[:, None, :].expand(st.shape[0], st.shape[1], W))
            layer_cache.conv_states[i] = st.contiguous()
    layer_cache.record_past = False


def _crop_attention(layer_cache, tail: int) -> None:
    """Drop the last ``tail`` tokens of one cache layer's attention keys / values (SSM / MLP layers: nothing)."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionCacheLayerMixin

    if isinstance(layer_cache, DynamicLayer) and not isinstance(layer_cache, DynamicSlidingWindowLayer):
        if layer_cache.is_initialized and layer_cache.keys.numel():
            DynamicLayer.crop(layer_cache, -tail)
    elif not isinstance(layer_cache, LinearAttentionCacheLayerMixin):
        raise ValueError(f"speculative decoding rolls back full-attention DynamicCache layers only; this model's "
                         f"cache has a {type(layer_cache).__name__} layer")


class DecodeSession:
    """Run a Hugging Face hybrid model with every SSM layer's decode step in a state cache.

    Args:
        model: a ``*ForCausalLM`` of a supported architecture (see
            :data:`~replayssm_quant.eval.adapters.SUPPORTED_MODELS`), in fp32 for
            reference-exact results, in eval mode. It may be spread over devices (accelerate's
            ``device_map``, e.g. ``"auto"``; offloaded blocks included): each SSM layer's caches, its Triton
            launches and its CUDA graph live on the device that layer computes on (where its prefill state
            comes out; :mod:`.placement`), the logits on the lm_head's.
        variants: one or several ``[MODE[@L]:]SPEC`` strings / :class:`Variant` (or a
            single string). Rows of the batch are variant-major.
        window: replay window L.
        seed: stochastic-rounding seed (each cache gets ``seed``; slots differ by their index).
        backend: ``"triton"``, ``"torch"`` or ``None`` (triton on CUDA, torch on CPU).
        default_mode: the mode of variants written without a ``MODE:`` prefix.
        cuda_graphs: on CUDA with the triton backend, record each SSM layer's step (all
            variants: 1-2 launches per cache plus glue), and in chunked execution each layer's chunked
            windows of a feed (window reads, ring fills, flushes), once per prefill as a CUDA graph and
            replay it on later calls (same kernels, same results; removes the per-cache Python and launch
            overhead that otherwise dominates a decode step or window). Ignored on CPU.
        exec_mode: ``"step"`` (default), ``"chunked"``: :meth:`feed` then runs ``T`` tokens per model
            forward through the chunked windows (every variant must be a replay variant), or ``"chunked-all"``:
            the same, conventional variants allowed (their state stepped token by token inside each layer).
        draft: ``None`` (default, no speculation) or a draft spec ``ngram:T[:N]`` (:func:`.drafting.parse_draft`):
            the caches get a draft capacity of ``T`` tokens, :meth:`generate` decodes speculatively
            (:func:`.speculative.speculative_generate`) and :meth:`verify` / :meth:`accept` are available;
            takes ``exec_mode="step"``.

    The session hooks the model when created; :meth:`close` (or ``with``) unhooks it. Its model calls run
    attention implemented as ``sdpa`` through :func:`.attention.grouped_sdpa_attention` (the same attention
    without ``repeat_kv`` copies of the KV cache when a mask is present, as in every chunked window); the
    model's own setting is restored after each call.
    Several sessions may be attached to one model; only the one inside :meth:`step`
    routes the SSM layers (one at a time).
    """

    def __init__(self, model, variants: str | Variant | Sequence[str | Variant], window: int = DEFAULT_WINDOW,
                 seed: int = 0, backend: str | None = None, default_mode: str = "replay", cuda_graphs: bool = True,
                 exec_mode: str = "step", draft: str | DraftSpec | None = None):
        if isinstance(variants, (str, Variant)):
            variants = [variants]
        self.variants: list[Variant] = [parse_variant(v, default_mode) for v in variants]
        if not self.variants:
            raise ValueError("a decode session needs at least one state variant")
        window, seed = check_positive_int("window", window), check_seed(seed)
        if backend not in (None, "triton", "torch"):
            raise ValueError(f"backend must be 'triton', 'torch' or None (auto), got {backend!r}")
        self.exec_mode = check_exec_mode(exec_mode)
        if exec_mode == "chunked" and not all(chunkable(v) for v in self.variants):   # (chunked-all: any)
            bad = ", ".join(v.label for v in self.variants if not chunkable(v))
            raise ValueError(f"chunked execution takes replay variants only ({bad} round every step: run them "
                             "in a session with exec_mode='step', or all variants with exec_mode='chunked-all')")
        self.draft: DraftSpec | None = parse_draft(draft)
        if self.draft is not None and exec_mode != "step":
            raise ValueError(f"draft {self.draft.text} takes exec_mode='step' (a speculative session runs its "
                             f"teacher-forced tokens as verify steps), got exec_mode={exec_mode!r}")
        self.model, self.window, self.seed, self.backend = model, window, seed, backend
        if self.draft is not None:
            for v in self.variants:
                w = v.window or window
                if v.mode == "replay" and self.draft.tokens > w:
                    raise ValueError(f"draft {self.draft.text} verifies {self.draft.tokens} tokens per step, more than "
                                     f"the replay window L={w} of {v.label}: use T <= L (or a longer window)")
        # REPLAYSSM_CUDA_GRAPHS=0 turns the graphs off everywhere (lm-eval plugin, KL harness)
        self.cuda_graphs = bool(cuda_graphs) and os.environ.get("REPLAYSSM_CUDA_GRAPHS", "1") != "0"
        self._graphs: dict[tuple[int, str], LayerGraph] = {}   # (SSM layer, "step" | "chunk") -> its graph
        self._graph_pools: dict = {}
        self._graphable: set[int] = set()     # SSM layers whose step and chunked windows are recorded as CUDA graphs
        self.layers = ssm_layers(model)
        if not self.layers:
            raise ValueError(f"{type(model).__name__} has no SSM layer this toolkit supports; supported: {SUPPORTED_MODELS}")
        self._cache_kw, self._has_ltk = _forward_kwargs(model)
        self._offloaded_input = input_device(model)     # where token ids go when the embeddings are offloaded
        self._has_positions = "position_ids" in inspect.signature(model.forward).parameters
        self._decoding = False
        self._feeding = False          # a multi-token teacher-forced forward (chunked execution) is running
        self._verifying = False        # a speculative verify forward is running (SSM layers -> cache.verify)
        self._pending = 0              # tokens of the last verify not yet accepted (0: none pending)
        self._row_pos = None           # draft sessions: int64 [rows], position of each row's next token
        #: draft sessions: the statistics of the last :meth:`generate` (:class:`.speculative.SpecStats`)
        self.spec_stats = None
        self._position = 0             # tokens fed since prefill
        self._handles: list = []
        self._caches: dict[int, list] = {}
        self._keys_checked: set[int] = set()   # SSM layers whose hooked keys were seen to repeat per key head
        self.num_docs = 0
        self.hf_cache = None
        self.attention_mask = None
        for idx, layer, fam in self.layers:
            self._handles += attach(layer, fam, self._make_run(idx), lambda: self._decoding,
                                    self._make_chunk_run(idx), lambda: self._feeding)

    # ---- context manager -------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Remove the hooks and drop the caches (the model is back to its own decoding)."""
        for h in self._handles:
            h.remove()
        self._handles, self._caches, self.hf_cache, self._graphs = [], {}, None, {}

    @property
    def num_rows(self) -> int:
        """Batch rows of the model: ``len(variants) * num_docs``."""
        return len(self.variants) * self.num_docs

    def rows(self, variant: int) -> slice:
        """The rows of variant index ``variant``."""
        return slice(variant * self.num_docs, (variant + 1) * self.num_docs)

    def _input_device(self) -> torch.device:
        """The embeddings' device (looked up per call: the model may have moved since the session was made), or for
        embeddings offloaded by accelerate (meta parameters) their execution device."""
        dev = self.model.get_input_embeddings().weight.device
        return self._offloaded_input if dev.type == "meta" else dev

    # ---- per-layer step ----------------------------------------------------------
    def _per_variant(self, idx: int, fn, q, k, v, g, beta) -> torch.Tensor:
        """``fn(cache, slots, q, k, v, g, beta)`` on each variant's rows of layer ``idx`` (rows variant-major: variant
        ``i`` holds rows ``i * D .. (i + 1) * D``), the outputs concatenated in row order."""
        caches, D = self._caches[idx], self.num_docs
        if len(caches) == 1:
            return fn(caches[0], self._slots[idx], q, k, v, g, beta)
        return torch.cat([fn(c, self._slots[idx], *(None if x is None else x[i * D:(i + 1) * D]
                                                     for x in (q, k, v, g, beta)))
                          for i, c in enumerate(caches)], 0)

    def _step_all(self, idx: int, q, k, v, g, beta) -> torch.Tensor:
        """One decode step of layer ``idx`` for every variant (rows variant-major; k per value head, as hooked): fp32
        ``[rows, HV, V]``."""
        return self._per_variant(idx, lambda c, *a: c.step(*a, validate=False), q, self._cache_keys(idx, k), v, g,
                                 beta)

    def _verify_all(self, idx: int, q, k, v, g, beta) -> torch.Tensor:
        """Output-only verify of ``T`` tokens in layer ``idx`` for every variant: inputs ``[rows, T, HV, *]``
        (rows variant-major) -> fp32 ``[rows, T, HV, V]``; nothing is committed until :meth:`accept`."""
        return self._per_variant(idx, lambda c, *a: c.verify(*a, validate=False), q, self._cache_keys(idx, k), v, g,
                                 beta)

    def _cache_keys(self, idx: int, k: torch.Tensor) -> torch.Tensor:
        """The hooked keys ``[rows, (T,) HV, K]`` as layer ``idx``'s caches take them: one per key head ``[rows, (T,)
        HK, K]`` (every ``HV / HK``-th value head's: the model repeated each key head for its group). Inside the
        recorded step or window, so a graph replay copies in the hooked keys and selects them itself. On a layer's
        first call (eager: a graph is recorded only after it) the keys are checked to be those repeats: one host
        sync."""
        cache = self._caches[idx][0]
        if cache.key_group == 1:
            return k
        shared = k.unflatten(-2, (cache.num_key_heads, cache.key_group))[..., 0, :].contiguous()
        if idx not in self._keys_checked:
            if not torch.equal(cache.value_head_keys(shared), k):
                raise RuntimeError(
                    f"SSM layer {idx}: the keys reaching the state cache are not one key head repeated for each of "
                    f"its {cache.key_group} value heads (HK = {cache.num_key_heads} for HV = {cache.num_heads}), as "
                    "this model's family is expected to give them")
            self._keys_checked.add(idx)
        return shared

    def _make_run(self, idx: int):
        def run(q, k, v, g, beta):
            with device_context(q.device), record_function("replayssm::ssm_step"):   # launches on the layer's GPU
                if self._verifying:          # a one-token verify: the model took its single-token path
                    return self._verify_all(idx, *(None if x is None else x[:, None]
                                                   for x in (q, k, v, g, beta)))[:, 0]
                if not self._use_graphs(idx, q):
                    return self._step_all(idx, q, k, v, g, beta)
                return self._graphed(idx, "step", lambda *a: self._step_all(idx, *a), (q, k, v, g, beta))
        return run

    def _make_chunk_run(self, idx: int):
        from replayssm_quant.kernels.chunked import chunked_forward_many

        def run(q, k, v, g, beta):
            """Inputs ``[rows, T, HV, *]`` (rows variant-major; k per value head, as hooked) -> fp32 ``[rows, T, HV, V]``."""
            with device_context(q.device), record_function("replayssm::ssm_chunk"):
                if self._verifying:
                    return self._verify_all(idx, q, k, v, g, beta)
                # every variant's rows at once: variants of one window share the window reads
                def windows(q, k, v, g, beta):
                    return chunked_forward_many(self._caches[idx], self._slots[idx], q, self._cache_keys(idx, k), v,
                                                g, beta)
                if not self._use_graphs(idx, q):
                    return windows(q, k, v, g, beta)
                return self._graphed(idx, "chunk", windows, (q, k, v, g, beta))
        return run

    # ---- CUDA graphs of the per-layer SSM call (a step, or the chunked windows of a feed) ----------
    def _use_graphs(self, idx: int, q: torch.Tensor) -> bool:
        return idx in self._graphable and q.device.type == "cuda" and not torch.cuda.is_current_stream_capturing()

    def _graphed(self, idx: int, kind: str, fn, inputs: tuple) -> torch.Tensor:
        """``fn(*inputs)`` -- the SSM call ``kind`` of every variant of layer ``idx``: ``"step"`` (one token) or
        ``"chunk"`` (the chunked windows of a :meth:`feed`) -- as one CUDA graph replay.

        The first call of a layer and kind with given input shapes (after each prefill) runs eagerly -- it
        compiles the Triton kernels -- and then records the same launches into a graph on static input buffers;
        later calls with those shapes copy the inputs in and replay. The recorded launches read and write only
        device tensors of the caches (states, ring, counters; no host-side step state, no host syncs: the chunked
        windows were made sync-free for this), so a replay is the eager call, bit for bit
        (``tests/eval/test_decode_graphs.py`` checks both kinds on a GPU). A chunked window graph holds a
        few hundred torch ops and one flush per cache, launched as one.
        """
        key = tuple(None if x is None else (tuple(x.shape), x.dtype) for x in inputs)
        entry = self._graphs.get((idx, kind))
        if entry is not None and entry.key == key:
            for dst, src in zip(entry.static_in, inputs):
                if dst is not None:
                    dst.copy_(src)
            entry.graph.replay()
            return entry.static_out.clone()
        out = fn(*inputs)                                    # the real call (and Triton warm-up)
        static_in = tuple(None if x is None else x.detach().clone() for x in inputs)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.current_stream().synchronize()
        if entry is not None:                                # new shapes (a shorter last chunk): drop the old graph
            del self._graphs[(idx, kind)], entry
        if inputs[0].device.index not in self._graph_pools:  # one memory pool per GPU, shared by its layers' graphs
            self._graph_pools[inputs[0].device.index] = torch.cuda.graph_pool_handle()
        pool = self._graph_pools[inputs[0].device.index]
        with torch.cuda.graph(graph, pool=pool):   # records only: nothing runs here
            static_out = fn(*static_in)
        self._graphs[(idx, kind)] = LayerGraph(key, graph, static_in, static_out,
                                               torch.device("cuda", torch.cuda.current_device()))
        return out

    def _new_caches(self, num_docs: int, devices: dict[int, torch.device]) -> None:
        """Caches of ``num_docs`` slots per variant for every SSM layer, on ``devices[layer_idx]``."""
        from replayssm_quant.kernels.state_cache import SSMStateCache

        self._caches, self._slots, self._graphs = {}, {}, {}
        for idx, layer, fam in self.layers:
            dev = devices[idx]
            backend = self.backend or ("triton" if dev.type == "cuda" else "torch")
            hv, k, v = fam.dims(layer)
            hk = fam.key_heads(layer)   # the rings keep one key per key head, as the model has them
            self._caches[idx] = [
                SSMStateCache(family=fam.name, spec=var.spec, num_slots=num_docs, num_heads=hv, head_k=k,
                              head_v=v, window=var.window or self.window, mode=var.mode, seed=self.seed, device=dev,
                              backend=backend, num_key_heads=hk, **self._draft_kwargs())
                for var in self.variants]
            self._slots[idx] = torch.arange(num_docs, device=dev, dtype=torch.int64)
        # decided once per prefill, not per step, per layer (a model split over CPU and GPU graphs its GPU layers):
        # a graph needs every cache of the layer on the triton backend on a GPU
        self._graphable = {idx for idx, cs in self._caches.items()
                           if self.cuda_graphs and all(c.backend == "triton" and c.device.type == "cuda" for c in cs)}

    def _draft_kwargs(self) -> dict:
        return {} if self.draft is None else {"max_draft": self.draft.tokens}

    # ---- prefill / step ------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run the prompts through the model's own (chunked, fp32) path and load every SSM state.

        Args:
            input_ids: int64 ``[D, P]`` prompts (left-pad with ``attention_mask`` for unequal lengths).
            attention_mask: optional int ``[D, P]`` (1 = token, 0 = left padding).

        Returns:
            float32 ``[len(variants) * D, vocab]``: next-token logits after the prompt (rows
            variant-major; identical across variants since prefill is the fp32 model path).
        """
        if input_ids.dim() != 2 or input_ids.shape[1] < 1:
            raise ValueError(f"input_ids must be [D, P] with P >= 1, got shape {tuple(input_ids.shape)}")
        D, n = input_ids.shape[0], len(self.variants)
        dev = self._input_device()
        input_ids = input_ids.to(dev)
        kw = {self._cache_kw: None, "use_cache": True}
        if self._has_ltk:
            kw["logits_to_keep"] = 1
        if attention_mask is not None:
            attention_mask = attention_mask.to(dev)
            kw["attention_mask"] = attention_mask
        self._decoding = False
        with grouped_attention(self.model):
            out = self.model(input_ids=input_ids, **kw)
        cache = getattr(out, self._cache_kw)
        self.num_docs = D
        # each layer's caches where its state came out of the prefill: the device that layer computes on
        self._new_caches(D, {idx: cache.layers[idx].recurrent_states[0].device for idx, _, _ in self.layers})
        for idx, layer, fam in self.layers:
            st = fam.state_to_vk(cache.layers[idx].recurrent_states[0])     # [D, HV, V, K]
            with device_context(st.device):
                for c in self._caches[idx]:
                    c.load_state(self._slots[idx], st)
        if n > 1:
            cache.reorder_cache(torch.arange(D, device=dev).repeat(n))
        for idx, _, _ in self.layers:
            # the model's own fp32 state is not used by the hooked decode path: free it
            layer_cache = cache.layers[idx]
            layer_cache.recurrent_states[0] = torch.zeros(1, device=layer_cache.recurrent_states[0].device)
        self.hf_cache = cache
        self.attention_mask = None if attention_mask is None else attention_mask.repeat(n, 1)
        self._position = 0
        self._pending = 0
        if self.draft is not None:      # rows' positions diverge once rows keep different numbers of tokens
            self._row_pos = torch.full((n * D,), input_ids.shape[1], dtype=torch.int64, device=dev)
            if self.attention_mask is None:
                self.attention_mask = torch.ones(n * D, input_ids.shape[1], dtype=torch.int64, device=dev)
        return out.logits[:, -1].float().repeat(n, 1)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row; returns float32 logits ``[num_rows, vocab]``.

        Args:
            tokens: int64 ``[num_rows]`` (or ``[D]``: the same token for every variant of a prompt).
        """
        if self.hf_cache is None:
            raise RuntimeError("call prefill() before step()")
        tokens = tokens.to(self._input_device())
        if tokens.dim() != 1 or tokens.shape[0] not in (self.num_docs, self.num_rows):
            raise ValueError(f"tokens must be [{self.num_rows}] or [{self.num_docs}], got {tuple(tokens.shape)}")
        if self.draft is not None:      # a draft session: a one-token verify, accepted
            logits = self.verify(tokens[:, None])[:, 0]
            self.accept(torch.ones(self.num_rows, dtype=torch.int64, device=tokens.device))
            return logits
        if tokens.shape[0] != self.num_rows:
            tokens = tokens.repeat(len(self.variants))
        kw = {self._cache_kw: self.hf_cache, "use_cache": True}
        if self.attention_mask is not None:
            self.attention_mask = torch.cat(
                [self.attention_mask, self.attention_mask.new_ones(self.num_rows, 1)], 1)
            kw["attention_mask"] = self.attention_mask
        self._decoding = True
        try:
            with grouped_attention(self.model):
                out = self.model(input_ids=tokens[:, None], **kw)
        finally:
            self._decoding = False
        self.hf_cache = getattr(out, self._cache_kw)
        self._position += 1
        return out.logits[:, -1].float()

    def _rows_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [D, T]`` or ``[rows, T]`` -> ``[rows, T]`` on the embedding's device."""
        tokens = tokens.to(self._input_device())
        if tokens.dim() != 2 or tokens.shape[0] not in (self.num_docs, self.num_rows) or tokens.shape[1] < 1:
            raise ValueError(f"tokens must be [{self.num_rows}, T] or [{self.num_docs}, T] with T >= 1, "
                             f"got {tuple(tokens.shape)}")
        return tokens if tokens.shape[0] == self.num_rows else tokens.repeat(len(self.variants), 1)

    @torch.no_grad()
    def feed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-force ``T`` tokens per row; float32 logits ``[num_rows, T, vocab]`` (position ``t``: after
        feeding ``tokens[:, t]``).

        With ``exec_mode="chunked"`` one model forward of ``T`` tokens (each SSM layer runs its windows
        chunked); it must start at a window boundary of every variant (tokens fed since prefill a multiple of
        each window), which holds when every earlier call fed a multiple of the windows. With
        ``exec_mode="step"``: ``T`` calls of :meth:`step`.

        Args:
            tokens: int64 ``[num_rows, T]`` (or ``[D, T]``: the same tokens for every variant of a prompt).
        """
        if self.hf_cache is None:
            raise RuntimeError("call prefill() before feed()")
        tokens = self._rows_tokens(tokens)
        if self.exec_mode == "step":
            return torch.stack([self.step(tokens[:, t]) for t in range(tokens.shape[1])], 1)
        # chunked / chunked-all: a conventional cache (window 1) is stepped token by token by chunked_forward
        for v in self.variants:
            w = v.window or self.window
            if self._position % w:
                raise ValueError(f"chunked feed must start at a window boundary: {self._position} tokens fed since "
                                 f"prefill, not a multiple of the window {w} of {v.label}")
        T = tokens.shape[1]
        kw = {self._cache_kw: self.hf_cache, "use_cache": True}
        if self.attention_mask is not None:
            self.attention_mask = torch.cat(
                [self.attention_mask, self.attention_mask.new_ones(self.num_rows, T)], 1)
            kw["attention_mask"] = self.attention_mask
        self._decoding = self._feeding = True
        try:
            with grouped_attention(self.model):
                out = self.model(input_ids=tokens, **kw)
        finally:
            self._decoding = self._feeding = False
        self.hf_cache = getattr(out, self._cache_kw)
        self._position += T
        return out.logits.float()

    # ---- speculative verify / accept (draft sessions) ----------------------------------------
    @torch.no_grad()
    def verify(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run ``T`` tokens per row through the model in one forward without committing them; float32 logits
        ``[num_rows, T, vocab]`` (position ``t``: after ``tokens[:, t]``). :meth:`accept` must follow.

        Args:
            tokens: int64 ``[num_rows, T]`` (or ``[D, T]``), ``1 <= T <=`` the draft spec's T: each row's last
                accepted (not yet fed) token, then its drafts.
        """
        if self.draft is None:
            raise RuntimeError("verify() needs a draft session: DecodeSession(..., draft='ngram:T')")
        if self.hf_cache is None:
            raise RuntimeError("call prefill() before verify()")
        if self._pending:
            raise RuntimeError(f"the last verify of {self._pending} tokens is not accepted yet: call accept() first")
        tokens = self._rows_tokens(tokens)
        T = tokens.shape[1]
        if T > self.draft.tokens:
            raise ValueError(f"verify of {T} tokens per row; this session's draft {self.draft.text} allows "
                             f"1..{self.draft.tokens}")
        R, dev = self.num_rows, tokens.device
        self.attention_mask = torch.cat([self.attention_mask, self.attention_mask.new_ones(R, T)], 1)
        kw = {self._cache_kw: self.hf_cache, "use_cache": True, "attention_mask": self.attention_mask}
        if self._has_positions:
            kw["position_ids"] = self._row_pos[:, None] + torch.arange(T, device=dev)
        for idx, _, _ in self.layers:      # keep every conv input of the T tokens until accept()
            self.hf_cache.layers[idx].activate_past_recording()
        self._decoding = self._feeding = self._verifying = True
        try:
            with grouped_attention(self.model):
                out = self.model(input_ids=tokens, **kw)
        finally:
            self._decoding = self._feeding = self._verifying = False
        self.hf_cache = getattr(out, self._cache_kw)
        self._pending = T
        return out.logits.float()

    @torch.no_grad()
    def accept(self, accepted: torch.Tensor) -> None:
        """Keep the first ``accepted[r]`` tokens of the last :meth:`verify` of row ``r`` (int ``[num_rows]``
        or ``[D]``, values in 1..T): commit them in every SSM cache, roll the conv states back to them, drop
        the rest from the attention layers' KV cache (one host sync: the longest kept length)."""
        T = self._pending
        if not T:
            raise RuntimeError("accept() needs a verify() before it")
        R, dev = self.num_rows, self._row_pos.device
        accepted = torch.as_tensor(accepted, device=dev)
        if accepted.dim() != 1 or accepted.shape[0] not in (self.num_docs, R) or accepted.is_floating_point():
            raise ValueError(f"accepted must be an int tensor [{R}] or [{self.num_docs}], got {accepted.dtype} "
                             f"{tuple(accepted.shape)}")
        accepted = accepted.to(torch.int64)
        if accepted.shape[0] != R:
            accepted = accepted.repeat(len(self.variants))
        lo, hi = torch.stack([accepted.min(), accepted.max()]).tolist()     # the one host sync
        if lo < 1 or hi > T:
            raise ValueError(f"accepted counts must be in 1..{T} (the tokens of the last verify), got {lo}..{hi}")
        D = self.num_docs
        for idx, _, _ in self.layers:
            for i, c in enumerate(self._caches[idx]):
                c.commit(self._slots[idx], accepted[i * D:(i + 1) * D].to(c.device), validate=False)
            _roll_back_conv(self.hf_cache.layers[idx], accepted)
        # attention: the common rejected tail goes, shorter rows keep masked holes
        tail = T - hi
        keep = torch.arange(T, device=dev)[None, :] < accepted[:, None]                 # [rows, T]
        mask = self.attention_mask
        mask[:, mask.shape[1] - T:] = keep.to(mask.dtype)
        if tail:
            self.attention_mask = mask[:, :mask.shape[1] - tail].contiguous()
            for layer in self.hf_cache.layers:
                _crop_attention(layer, tail)
        self._row_pos += accepted
        self._position += hi
        self._pending = 0

    def chunk_tokens(self) -> int:
        """Tokens per chunked forward that keep every later forward on a window boundary: the least common
        multiple of the variants' windows."""
        return math.lcm(*[v.window or self.window for v in self.variants])

    def caches(self, layer_idx: int) -> list:
        """The per-variant ``SSMStateCache`` list of SSM layer ``layer_idx`` (after :meth:`prefill`)."""
        return self._caches[layer_idx]

    def placement(self) -> dict[int, dict]:
        """Per SSM layer (after :meth:`prefill`): ``{"cache_devices": sorted devices of every tensor of its caches
        and slots, "graph_device": the GPU its CUDA graph was captured on (None: no graph yet),
        "graph_buffers": sorted devices of the graph's static buffers}`` (device strings)."""
        out = {}
        for idx, caches in self._caches.items():
            devs = {str(self._slots[idx].device)}
            for c in caches:
                devs |= {str(t.device) for t in vars(c).values() if isinstance(t, torch.Tensor)}
                for stored in {id(c.hp): c.hp, id(c.lp): c.lp}.values():
                    devs |= {str(t.device) for t in vars(stored).values() if isinstance(t, torch.Tensor)}
            g = self._graphs.get((idx, "step")) or self._graphs.get((idx, "chunk"))
            bufs = None if g is None else sorted({str(t.device) for t in (*g.static_in, g.static_out) if t is not None})
            out[idx] = {"cache_devices": sorted(devs), "graph_device": None if g is None else str(g.device),
                        "graph_buffers": bufs}
        return out

    # ---- conveniences for harnesses -------------------------------------------------------
    @torch.no_grad()
    def teacher_force(self, tokens: torch.Tensor, on_logits: Callable[[int, torch.Tensor], None]) -> None:
        """Feed ``tokens`` (int64 ``[D, N]``) one position at a time; ``on_logits(t, logits [rows, vocab])``
        is called after feeding ``tokens[:, t]`` (no host sync happens here)."""
        for t in range(tokens.shape[1]):
            on_logits(t, self.step(tokens[:, t]))

    @torch.no_grad()
    def loglikelihood(self, context: torch.Tensor, continuation: torch.Tensor,
                      context_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced log-probability of ``continuation`` after ``context``.

        Args:
            context: int64 ``[D, P]`` (left-padded with ``context_mask`` if lengths differ).
            continuation: int64 ``[D, N]``, N >= 1 (equal lengths).

        Returns:
            ``(logprob float32 [rows], is_greedy bool [rows])``: the summed log-probability of the
            continuation per row (rows variant-major), and whether every continuation token was the argmax.
        """
        logits = self.prefill(context, context_mask)
        dev = logits.device
        cont = continuation.to(dev).repeat(len(self.variants), 1)
        total = torch.zeros(cont.shape[0], device=dev)
        greedy = torch.ones(cont.shape[0], dtype=torch.bool, device=dev)
        for t in range(cont.shape[1]):
            if t > 0:
                logits = self.step(cont[:, t - 1])
            lp = torch.log_softmax(logits, -1)
            total += lp.gather(1, cont[:, t:t + 1])[:, 0]
            greedy &= lp.argmax(-1) == cont[:, t]
        return total.cpu(), greedy.cpu()

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, attention_mask: torch.Tensor | None = None,
                 stop_token_ids: Iterable[int] = (), stop_fn: Callable[[int, list[int]], bool] | None = None,
                 check_every: int = 8) -> list[list[int]]:
        """Greedy generation for every (variant, prompt) row.

        Args:
            input_ids: int64 ``[D, P]`` prompts; attention_mask as in :meth:`prefill`.
            max_new_tokens: at most this many tokens per row.
            stop_token_ids: a row stops after emitting one of these (it is kept in the output).
            stop_fn: ``stop_fn(row, tokens_so_far) -> bool``, checked on the host every
                ``check_every`` steps (e.g. stop strings); the output is cut where it first returned true
                at a check.

        Returns:
            ``rows`` lists of generated token ids (rows variant-major).

        A draft session decodes speculatively (:func:`.speculative.speculative_generate`; the same tokens,
        ``stop_fn`` checked after every verify step) and leaves its statistics in :attr:`spec_stats`.
        """
        if self.draft is not None:
            return speculative_generate(self, input_ids, max_new_tokens, attention_mask, stop_token_ids, stop_fn)
        logits = self.prefill(input_ids, attention_mask)
        dev = logits.device
        R = logits.shape[0]
        stop_ids = torch.tensor(sorted(set(int(t) for t in stop_token_ids)), dtype=torch.int64, device=dev)
        done = torch.zeros(R, dtype=torch.bool, device=dev)
        gen = torch.empty(R, 0, dtype=torch.int64, device=dev)
        host_done = [False] * R
        for t in range(max_new_tokens):
            nxt = logits.argmax(-1)
            gen = torch.cat([gen, nxt[:, None]], 1)
            if stop_ids.numel():
                done |= torch.isin(nxt, stop_ids)
            last = t == max_new_tokens - 1
            if stop_fn is not None and ((t + 1) % check_every == 0 or last):
                rows = gen.cpu().tolist()
                for r in range(R):
                    if not host_done[r] and stop_fn(r, rows[r]):
                        host_done[r] = True
                done |= torch.tensor(host_done, device=dev)
            if last or ((t + 1) % check_every == 0 and bool(done.all())):
                break
            logits = self.step(nxt)
        return cut_rows(gen.cpu().tolist(), set(stop_ids.tolist()), stop_fn)
