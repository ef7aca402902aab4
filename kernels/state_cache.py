"""SSMStateCache: the per-layer decode state of a batch of sequence slots (docs/CONTRACTS.md).

Holds, for ``num_slots`` slots and ``num_heads`` (= HV) heads of ``[V, K]`` state:

* ``hp``: the recurrence checkpoint in the spec's recurrence format;
* ``lp``: the read copy in the read format (the same object as ``hp`` for a shared spec);
* the ring of inputs received since the last flush, capacity ``L - 1``
  (``ring_g float32 [S, HV, L-1, GK]`` cumulative log decays since the checkpoint, G_j = G_{j-1} + g_j
  (:func:`.reference.cumulative_log_decay`), GK = K for kda else 1;
  ``ring_k [S, HK, L-1, K]`` (one key per key head: ``HK = HV / key_group``, HK = HV unless the model shares
  keys across value heads); ``ring_v [S, HV, L-1, V]`` raw v (mamba2: v = u);
  (these two inputs in ``ring_dtype``); ``ring_beta float32 [S, HV, L-1]``; ``ring_u float32 [S, HV, L-1, V]``
  the corrections
  (gdn/kda): used for outputs, and for a shared spec also by the flush
  (Algorithm 1), whose ring then keeps no raw v / beta: ``ring_v`` is
  ``[S, HV, L-1, 0]`` and ``ring_beta`` ``[S, HV, 0]``; a separate spec's flush
  recomputes the corrections from ``S_hp`` and the raw v, beta (Algorithm 3); mamba2's ``ring_beta`` is
  ``[S, HV, 0]`` too (no beta), and conventional decoding keeps no ring: its ring tensors are empty);
* ``ring_count int32 [S + 1]`` entries in the ring, ``flush_count int32 [S + 1]``
  (Philox c2); entry ``S`` is a scratch slot that padded rows write to, so counter
  updates need no host synchronisation; ``step_arrivals int32 [S + 1]``, zero between
  steps: the fused step's programs of a row count themselves in, and the last one
  advances the row's counters (:func:`.fused._advance_if_last`); ``head_arrivals(B)`` int32 ``[B * HV]``, zero
  between steps: the arrival counts of a batch-``B`` fused step's nvfp4 flush spread over a head's programs
  (:meth:`SSMStateCache.head_arrivals`).

Speculative decoding (``max_draft`` T_max > 0, :mod:`.spec_decode`): the ring's capacity is ``L - 1 + T_max``
(room for the verify window past the committed entries); ``draft_g float32 [S, HV, T_max, GK]`` the raw log
decays of the last verify window (shared delta-rule specs also ``draft_v [S, HV, T_max, V]`` in ``ring_dtype``
and ``draft_beta float32 [S, HV, T_max]``: their ring keeps no raw inputs); ``draft_count int32 [S + 1]`` the T of
the slot's pending verify (0: none). Conventional mode instead keeps ``snap``, one snapshot per draft token in the
checkpoint format (``S * T_max`` states, snapshot t of slot s at ``s * T_max + t``).

Flush semantics: see :mod:`.reference`. ``mode="conventional"`` is the window-1
case (every step reads, updates and rewrites the one checkpoint); it needs a
shared spec. ``backend="torch"`` runs :func:`.reference.torch_step`,
``backend="triton"`` the kernel of :mod:`.decode`; both keep bit-identical
checkpoints under the Triton interpreter.
"""

from __future__ import annotations

import torch

from replayssm_quant.quant import parse_state_spec, StateSpec
from replayssm_quant.quant.philox import check_seed
from replayssm_quant.quant.spec import check_mode, check_positive_int

from .launch import LaunchKnobs, check_device_formats
from .naive import DELTA_RULE, PER_KEY_DECAY, check_family
from .reference import cached_corrections, replay_ring, torch_step
from .storage import BACKENDS, StoredState, TAG_CONVENTIONAL, TAG_FLUSH, sr_rbits

_ACT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: bytes of the per-slot int32 counters every mode keeps: ring_count, flush_count, step_arrivals
COUNTER_BYTES = 12


class SSMStateCache:
    """Decode state of one SSM layer for ``num_slots`` sequence slots.

    Args:
        family: ``"mamba2"`` | ``"gdn"`` | ``"kda"``.
        spec: state spec string or :class:`StateSpec` (``fp32``, ``fp8+sr``, ``nvfp4/fp16`` ...).
        num_slots, num_heads (HV), head_k (K), head_v (V): sizes.
        window: replay window L (>= 1; ignored by ``mode="conventional"``).
        mode: ``"replay"`` | ``"conventional"``.
        seed: Philox seed for stochastic rounding.
        device: where the tensors live.
        backend: ``"torch"`` | ``"triton"``.
        ring_dtype: dtype of the input vectors the ring keeps (k, raw v): ``torch.float32`` (default) holds
            activations of any dtype; ``torch.bfloat16`` / ``torch.float16`` hold activations of that dtype
            exactly in half the bytes (:meth:`step` then refuses k, v of another dtype). The ring's betas,
            cumulative log decays and corrections stay float32.
        knobs: :class:`.launch.LaunchKnobs`, overrides of the Triton launcher's heuristics (default: none; the
            results are the same bits whatever the knobs, only the launches differ).
        num_key_heads: HK, the key heads (default: ``num_heads``). Models whose value heads share keys (Qwen3.5
            GDN: 16 key heads for 32 value heads; Nemotron-H Mamba-2: 8 groups of B for 128 heads) pass their
            count: :meth:`step` then takes k ``[B, HK, K]`` (value head h reads key head ``h // (HV / HK)``) and
            the ring keeps one key per key head (``key_group`` = HV / HK value heads share it), fewer bytes per
            step than the repeated keys and the same results (:meth:`verify` likewise takes k per key head).
        max_draft: T_max, the most tokens one :meth:`verify` takes (0, the default: no speculation, no extra
            memory). Replay: 1 <= T_max <= window; the ring grows to ``window - 1 + T_max`` entries.
    """

    def __init__(self, family: str, spec, num_slots: int, num_heads: int, head_k: int, head_v: int,
                 window: int = 16, mode: str = "replay", seed: int = 0, device="cpu", backend: str = "triton",
                 ring_dtype: torch.dtype = torch.float32, knobs: LaunchKnobs | None = None, max_draft: int = 0,
                 num_key_heads: int | None = None):
        self.family = check_family(family)
        self.spec: StateSpec = spec if isinstance(spec, StateSpec) else parse_state_spec(spec)
        self.mode = check_mode(mode)
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
        self.backend = backend
        if ring_dtype not in _ACT_DTYPES:
            raise ValueError(f"ring_dtype {ring_dtype!r}: allowed torch.float32, torch.bfloat16, torch.float16 (the "
                             "dtype of the activations k, v the ring keeps)")
        self.ring_dtype = ring_dtype
        if knobs is not None and not isinstance(knobs, LaunchKnobs):
            raise ValueError(f"knobs must be a LaunchKnobs (replayssm_quant.kernels.launch), got {type(knobs).__name__}")
        self.knobs = knobs or LaunchKnobs()
        num_slots, num_heads, head_k, head_v = (
            check_positive_int(name, x) for name, x in (("num_slots", num_slots), ("num_heads", num_heads),
                                                        ("head_k", head_k), ("head_v", head_v)))
        if mode == "replay":   # (conventional decoding has no window: L = 1)
            window = check_positive_int("window", window)
        if mode == "conventional" and not self.spec.shared:
            raise ValueError(f"spec {self.spec.text!r} has separate read/recurrence formats, which only the "
                             "replay mode has; conventional decoding takes a shared spec (FMT[+sr])")
        if isinstance(max_draft, bool) or not isinstance(max_draft, int) or max_draft < 0:
            raise ValueError(f"max_draft must be an int >= 0 (0: no speculative verify), got {max_draft!r}")
        if mode == "replay" and max_draft > window:
            raise ValueError(f"max_draft={max_draft} exceeds the window {window}: a verify takes at most window "
                             "tokens (the committed tail after a flush must fit the next window)")
        self.max_draft = max_draft
        HK = num_heads if num_key_heads is None else check_positive_int("num_key_heads", num_key_heads)
        if num_heads % HK:
            raise ValueError(f"num_key_heads={HK} must divide num_heads={num_heads} (each key head serves "
                             f"num_heads / num_key_heads value heads)")
        self.num_key_heads, self.key_group = HK, num_heads // HK
        self.seed = check_seed(seed)
        self.device = torch.device(device)
        if backend == "triton":
            check_device_formats(self.device, (self.spec.recur.name, self.spec.read.name),
                                 f"SSMStateCache(spec={self.spec.text!r})")
        self.num_slots, self.num_heads, self.head_k, self.head_v = num_slots, num_heads, head_k, head_v
        self.window = 1 if mode == "conventional" else window
        self.tag = TAG_CONVENTIONAL if mode == "conventional" else TAG_FLUSH
        self.delta = DELTA_RULE[family]
        self.per_key = PER_KEY_DECAY[family]
        S, HV, K, V, dev = num_slots, num_heads, head_k, head_v, self.device
        self.hp = StoredState(self.spec.recur, S, HV, V, K, dev)
        self.lp = self.hp if self.spec.shared else StoredState(self.spec.read, S, HV, V, K, dev)
        L1 = max(self.window - 1, 1) + (max_draft if mode == "replay" else 0)   # ring capacity
        GK = K if self.per_key else 1
        f32 = dict(dtype=torch.float32, device=dev)
        # what the ring keeps is allocated, the rest is an empty tensor (a kernel argument nothing reads): conventional
        # decoding keeps no ring (every step rounds into the checkpoint); a shared delta-rule spec (Algorithm 1)
        # flushes with the cached corrections u_j, so it keeps no raw v_j / beta_j, which separate specs (Algorithm
        # 3) recompute u_j from; mamba2 has no beta
        ring = mode == "replay"
        raw = ring and not cached_corrections(self)
        self.ring_g = torch.zeros(S, HV, L1, GK if ring else 0, **f32)
        act = dict(dtype=ring_dtype, device=dev)
        self.ring_k = torch.zeros(S, HK, L1, K if ring else 0, **act)
        self.ring_v = torch.zeros(S, HV, L1, V if raw else 0, **act)
        self.ring_beta = torch.zeros(S, HV, L1 if raw and self.delta else 0, **f32)
        self.ring_u = torch.zeros(S, HV, L1, V if ring else 0, **f32) if self.delta else self.ring_v
        self.ring_count = torch.zeros(S + 1, dtype=torch.int32, device=dev)
        self.flush_count = torch.zeros(S + 1, dtype=torch.int32, device=dev)
        self.draft_count = torch.zeros(S + 1, dtype=torch.int32, device=dev)
        self.step_arrivals = torch.zeros(S + 1, dtype=torch.int32, device=dev)
        self._head_arrivals: dict[int, torch.Tensor] = {}   # by batch size (head_arrivals)
        Tm = max_draft
        if mode == "replay":
            self.draft_g = torch.zeros(S, HV, Tm, GK, **f32)
            self.draft_v = torch.zeros(S, HV, Tm if not raw else 0, V, **act)
            self.draft_beta = torch.zeros(S, HV, Tm if not raw else 0, **f32)
            self.snap = None
        else:
            self.draft_g = self.draft_v = self.draft_beta = None
            self.snap = StoredState(self.spec.recur, S * Tm, HV, V, K, dev) if Tm else None

    def value_head_keys(self, k: torch.Tensor, dim: int = -2) -> torch.Tensor:
        """Keys per key head (``HK`` along ``dim``) -> per value head (``HV``): key head i repeated for its
        ``key_group`` value heads (``k`` itself when every head has its own key)."""
        return k if self.key_group == 1 else k.repeat_interleave(self.key_group, dim=dim)

    def head_arrivals(self, batch: int) -> torch.Tensor:
        """int32 ``[batch * HV]``, zero between steps: per (row, head) of a ``batch``-row fused step, the count of
        its V-block programs done with pass 1 of an nvfp4 flush spread over them (``StepPlan.nvfp4_spread``,
        :func:`.fused._step_program`). The last program to arrive resets its count, so the buffer is zeroed once,
        when a batch size first needs it, not on every step (a memset per step is one more launch, or graph node,
        on every step). One buffer per batch size, never replaced: a captured CUDA graph keeps its address. It is
        made by the first eager step of a batch size (the warm-up that also compiles the kernels); a capture must
        not be the first step, since its zeroing would only run on the graph's replays."""
        buf = self._head_arrivals.get(batch)
        if buf is None:
            if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"SSMStateCache.step: the first step of batch {batch} is being captured into a "
                                   "CUDA graph; run one eager step of this batch size first (it also compiles "
                                   "the kernels), then capture")
            buf = self._head_arrivals[batch] = torch.zeros(batch * self.num_heads, dtype=torch.int32,
                                                           device=self.device)
        return buf

    def arrivals_clear(self) -> bool:
        """Whether no arrival count is left over between steps (``step_arrivals`` and every
        :meth:`head_arrivals` buffer all zero): a step whose programs did not all arrive, or a count not reset by
        its last program, leaves one."""
        return bool((self.step_arrivals == 0).all()) and all(bool((t == 0).all())
                                                              for t in self._head_arrivals.values())

    # ------------------------------------------------------------------ info
    def ring_bytes_per_slot(self) -> int:
        ts = [self.ring_g, self.ring_k, self.ring_v, self.ring_beta] + ([self.ring_u] if self.delta else [])
        if self.max_draft:
            ts += [self.draft_g, self.draft_v, self.draft_beta]
        return sum(t[0].numel() * t.element_size() for t in ts) + COUNTER_BYTES + (4 if self.max_draft else 0)

    def bytes_per_slot(self) -> int:
        """Checkpoint(s) + ring + counters per slot, in bytes."""
        n = self.hp.bytes_per_slot() + (0 if self.spec.shared else self.lp.bytes_per_slot())
        if self.mode == "conventional":   # + the snapshots of the draft tokens and the counters
            return n + self.max_draft * self.hp.bytes_per_slot() + COUNTER_BYTES + (4 if self.max_draft else 0)
        return n + self.ring_bytes_per_slot()

    def __repr__(self):
        ring = "" if self.ring_dtype == torch.float32 else f", ring_dtype={self.ring_dtype}"
        if self.max_draft:
            ring += f", max_draft={self.max_draft}"
        return (f"SSMStateCache({self.family}, {self.spec.text}, {self.mode}, L={self.window}, "
                f"slots={self.num_slots}, HV={self.num_heads}, K={self.head_k}, V={self.head_v}, "
                f"backend={self.backend}, device={self.device}{ring})")

    # ------------------------------------------------------------------ validation
    def _on_device(self, x: torch.Tensor) -> bool:
        """Whether tensor ``x`` is on the cache's device (a cache on ``cuda`` without an index: the current one)."""
        d = self.device
        if x.device.type != d.type:
            return False
        if d.type != "cuda":
            return True
        return x.device.index == (d.index if d.index is not None else torch.cuda.current_device())

    def _slots(self, slots, allow_negative: bool, check_values: bool = True) -> torch.Tensor:
        """Slot indices as a contiguous 1-D tensor on the cache's device (the kernels read its memory). With
        ``check_values`` (host syncs) int64, in range and distinct; without, the caller's int32/int64 dtype and
        no sync (``validate=False``: a contiguous tensor on the device passes through as it is)."""
        if not isinstance(slots, torch.Tensor):   # a list / range of ints: on the cache's device
            slots = torch.as_tensor(slots, device=self.device)
        if slots.dtype not in (torch.int32, torch.int64) or slots.dim() != 1:
            raise ValueError(f"slot indices must be a 1-D int32/int64 tensor, got {slots.dtype} "
                             f"{tuple(slots.shape)}")
        if not self._on_device(slots):
            raise ValueError(f"slot indices on {slots.device}, cache on {self.device}")
        if not check_values:
            return slots.contiguous()
        slots = slots.to(torch.int64).contiguous()
        if slots.numel():
            lo, hi = int(slots.min()), int(slots.max())
            if hi >= self.num_slots or (not allow_negative and lo < 0):
                raise ValueError(f"slot index out of range: got [{lo}, {hi}], valid 0..{self.num_slots - 1}"
                                 + (" (negative = padded row)" if allow_negative else ""))
            valid = slots[slots >= 0]
            if torch.unique(valid).numel() != valid.numel():
                raise ValueError("duplicate slot indices in one call: each slot may appear at most once")
        return slots

    def _act(self, name, x, shape):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _ACT_DTYPES:
            raise ValueError(f"{name} has dtype {x.dtype}; allowed: float32, bfloat16, float16")
        if tuple(x.shape) != tuple(shape):
            keys = (f" (k per key head: this cache has num_key_heads={self.num_key_heads} for num_heads="
                    f"{self.num_heads})" if name == "k" and self.key_group > 1 else "")
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}{keys}")
        if not self._on_device(x):
            raise ValueError(f"{name} is on {x.device}, the cache on {self.device}")
        return x.detach().contiguous()   # the cache is decode state: no gradients flow through it

    # ------------------------------------------------------------------ API
    def load_state(self, slots, state: torch.Tensor) -> None:
        """Load fp32 states (e.g. from prefill) into slots: the two casts of a flush; ring emptied.

        Args:
            slots: int ``[n]`` slot indices (>= 0, distinct).
            state: float32 ``[n, HV, V, K]``.
        """
        slots = self._slots(slots, allow_negative=False)
        HV, V, K = self.num_heads, self.head_v, self.head_k
        if not isinstance(state, torch.Tensor) or state.dtype != torch.float32:
            raise ValueError(f"state must be a float32 tensor [n, {HV}, {V}, {K}]")
        if tuple(state.shape) != (slots.numel(), HV, V, K):
            raise ValueError(f"state has shape {tuple(state.shape)}, expected {(slots.numel(), HV, V, K)}")
        if not self._on_device(state):
            raise ValueError(f"state is on {state.device}, the cache on {self.device}")
        if slots.numel() == 0:
            return
        state = state.detach()   # the cache keeps values, not the prefill's autograd graph
        self.flush_count[slots] = 0
        rb = None
        if self.spec.sr:
            rb = sr_rbits(self.seed, slots, HV, V, K, self.flush_count[slots], TAG_FLUSH)
        self.hp.encode(slots, state, rb)
        if not self.spec.shared:
            self.lp.encode(slots, state)
        self.ring_count[slots] = 0
        self.flush_count[slots] = 1
        self.draft_count[slots] = 0

    def stored_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor the cache stores, by name (the tensors themselves, not copies): ``hp0 hp1 hp2`` / ``lp0 lp1
        lp2`` (:meth:`StoredState.tensors` of the recurrence checkpoint and the read copy: the same tensors for a
        shared spec), ``ring_g ring_k ring_v ring_beta ring_u``, ``ring_count flush_count`` (scratch slot
        included); with ``max_draft`` > 0 also ``draft_count`` and ``draft_g draft_v draft_beta`` (replay) or
        ``snap0 snap1 snap2`` (conventional: the snapshots' :meth:`StoredState.tensors`). For dumping, restoring and
        comparing whole caches (scripts/gpu). ``step_arrivals`` is not state (zero between steps) and not listed."""
        hp, lp = self.hp.tensors(), self.lp.tensors()
        d = dict(hp0=hp[0], hp1=hp[1], hp2=hp[2], lp0=lp[0], lp1=lp[1], lp2=lp[2], ring_g=self.ring_g,
                 ring_k=self.ring_k, ring_v=self.ring_v, ring_beta=self.ring_beta, ring_u=self.ring_u,
                 ring_count=self.ring_count, flush_count=self.flush_count)
        if self.max_draft:
            d["draft_count"] = self.draft_count
            if self.snap is not None:
                d.update({f"snap{i}": t for i, t in enumerate(self.snap.tensors())})
            else:
                d.update(draft_g=self.draft_g, draft_v=self.draft_v, draft_beta=self.draft_beta)
        return d

    def checkpoint(self, slots) -> torch.Tensor:
        """Recurrence checkpoint decoded to float32 ``[n, HV, V, K]``."""
        slots = self._slots(slots, allow_negative=False)
        return self.hp.decode(slots)

    def state(self, slots) -> torch.Tensor:
        """Current float32 state ``[n, HV, V, K]``: the recurrence checkpoint replayed through the ring
        sequentially, with the corrections the next flush would use (shared delta-rule specs: the cached
        ``u_j``; separate specs: recomputed from the checkpoint)."""
        slots = self._slots(slots, allow_negative=False)
        S = self.hp.decode(slots)
        hs = self.ring_count[slots]
        for h in torch.unique(hs).tolist():
            sel = torch.nonzero(hs == h).flatten()
            S[sel] = replay_ring(self, S[sel], slots[sel], h)
        return S

    def _check_inputs(self, lead, q, k, v, g, beta, validate):
        """Shapes, dtypes and devices of a step's (``lead = (B,)``) or a verify's (``(B, T)``) inputs, and with
        ``validate`` the sign of ``g``. Returns them contiguous."""
        HV, K, V = self.num_heads, self.head_k, self.head_v
        q = self._act("q", q, (*lead, HV, K))
        k = self._act("k", k, (*lead, self.num_key_heads, K))
        v = self._act("v", v, (*lead, HV, V))
        for name, x in (("k", k), ("v", v)):   # the ring keeps them: exact only in their own dtype
            if self.ring_dtype != torch.float32 and x.dtype != self.ring_dtype:
                raise ValueError(f"{name} has dtype {x.dtype}, but this cache's ring keeps {self.ring_dtype} inputs "
                                 f"(ring_dtype): pass {self.ring_dtype} k and v or create the cache with "
                                 "ring_dtype=torch.float32")
        g = self._act("g", g, (*lead, HV, K) if self.per_key else (*lead, HV))
        if validate and g.numel() and not bool((g <= 0).all()):
            bad = "NaN" if bool(g.isnan().any()) else f"positive log decays (max {float(g.max()):.4g})"
            raise ValueError(f"g holds {bad}: the log decay g must be <= 0 "
                             "(a decay a = exp(g) in (0, 1]; Mamba-2: g = dt * A with A < 0)")
        if self.delta:
            if beta is None:
                raise ValueError(f"family {self.family!r} needs beta [..., HV]")
            beta = self._act("beta", beta, (*lead, HV))
        elif beta is not None:
            raise ValueError("family 'mamba2' takes no beta (pass beta=None)")
        return q, k, v, g, beta

    def step(self, slot_idx, q, k, v, g, beta=None, out=None, validate: bool = True) -> torch.Tensor:
        """One decode step for every row of a batch.

        Args:
            slot_idx: int32/int64 ``[B]``, row -> slot; negative = padded row (no slot touched, zero output).
            q: ``[B, HV, K]``; k: ``[B, HK, K]`` (HK = ``num_key_heads``); v: ``[B, HV, V]``; g: log decay
                ``[B, HV]`` (kda: ``[B, HV, K]``), <= 0;
                beta: ``[B, HV]`` (gdn, kda) or ``None`` (mamba2). float32 / bfloat16 / float16; k and v in
                ``ring_dtype`` unless that is float32.
            out: optional contiguous float32 ``[B, HV, V]`` on the cache's device to write into.
            validate: check slot ranges and duplicates and that ``g <= 0`` (host syncs: the benchmark and the
                model decode sessions turn it off; the kernels take any ``g`` and a positive one grows the state).

        Returns:
            float32 ``[B, HV, V]``.
        """
        slot_idx = self._slots(slot_idx, allow_negative=True, check_values=validate)
        B, HV, K, V = slot_idx.numel(), self.num_heads, self.head_k, self.head_v
        q, k, v, g, beta = self._check_inputs((B,), q, k, v, g, beta, validate)
        if out is not None and (not isinstance(out, torch.Tensor) or out.dtype != torch.float32
                                or tuple(out.shape) != (B, HV, V) or not out.is_contiguous()
                                or not self._on_device(out)):
            raise ValueError(f"out must be a contiguous float32 tensor of shape {(B, HV, V)} on {self.device}")
        if self.max_draft:   # a step drops the slot's pending verify (its draft entries get overwritten)
            eff = torch.where(slot_idx >= 0, slot_idx, torch.full_like(slot_idx, self.num_slots))
            self.draft_count[eff] = 0
        if self.backend == "triton":
            from .decode import triton_step
            return triton_step(self, slot_idx, q, k, v, g, beta, out, advance=True)
        g = g.float()
        if not self.per_key:
            g = g.unsqueeze(-1)
        if beta is None:
            beta = torch.zeros(B, HV, dtype=torch.float32, device=self.device)
        res = torch_step(self, slot_idx, q.float(), self.value_head_keys(k).float(), v.float(), g, beta.float())
        if out is not None:
            out.copy_(res)
            res = out
        self._advance(slot_idx)
        return res

    # ------------------------------------------------------------------ speculative decoding (Algorithm 2)
    def verify(self, slot_idx, q, k, v, g, beta=None, out=None, validate: bool = True) -> torch.Tensor:
        """Verify ``T`` draft tokens per row output-only (:mod:`.spec_decode`): the T outputs from the read copy and
        the ring (replay) or from T rounded snapshots (conventional); nothing committed until :meth:`commit`.

        Args:
            slot_idx: int32/int64 ``[B]``; negative = padded row (zero output, nothing touched).
            q: ``[B, T, HV, K]``; k: ``[B, T, HK, K]`` (HK = ``num_key_heads``); v: ``[B, T, HV, V]``; g:
                ``[B, T, HV]`` (kda ``[B, T, HV, K]``), <= 0;
                beta: ``[B, T, HV]`` or ``None`` (mamba2); ``1 <= T <= max_draft``.
            out: optional contiguous float32 ``[B, T, HV, V]``.
            validate: as :meth:`step` (host syncs).

        Returns:
            float32 ``[B, T, HV, V]``.
        """
        from .spec_decode import verify
        if not self.max_draft:
            raise ValueError("verify needs a cache created with max_draft >= 1 (the most draft tokens per verify); "
                             "this one has max_draft=0")
        slot_idx = self._slots(slot_idx, allow_negative=True, check_values=validate)
        if not isinstance(q, torch.Tensor) or q.dim() != 4:
            raise ValueError(f"q must be a tensor [B, T, HV, K], got {getattr(q, 'shape', type(q).__name__)}")
        B, T = slot_idx.numel(), q.shape[1]
        if not 1 <= T <= self.max_draft:
            raise ValueError(f"verify of T={T} tokens: allowed 1..{self.max_draft} (max_draft)")
        q, k, v, g, beta = self._check_inputs((B, T), q, k, v, g, beta, validate)
        HV, V = self.num_heads, self.head_v
        if out is None:
            out = torch.empty(B, T, HV, V, dtype=torch.float32, device=self.device)
        elif (not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or tuple(out.shape) != (B, T, HV, V)
              or not out.is_contiguous() or not self._on_device(out)):
            raise ValueError(f"out must be a contiguous float32 tensor of shape {(B, T, HV, V)} on {self.device}")
        if not self.per_key:
            g = g.unsqueeze(-1)
        if beta is None:
            beta = torch.zeros(B, T, HV, dtype=torch.float32, device=self.device)
        return verify(self, slot_idx, q, k, v, g, beta, out)

    def commit(self, slot_idx, accepted, validate: bool = True) -> None:
        """Commit the first ``accepted[b]`` tokens of row b's last :meth:`verify` (:mod:`.spec_decode`): the ring
        pointer moves (replay; a flush when the window's L-th token is committed) or the accepted snapshot is
        restored (conventional). Padded rows untouched.

        Args:
            slot_idx: int32/int64 ``[B]`` (the rows of the verify, or any of them).
            accepted: int32/int64 ``[B]`` on the cache's device, ``1 <= accepted <= T`` of the slot's verify.
            validate: check slots, that each slot has a pending verify and the range of ``accepted`` (host syncs);
                off: no host synchronisation.
        """
        from .spec_decode import commit
        if not self.max_draft:
            raise ValueError("commit needs a cache created with max_draft >= 1; this one has max_draft=0")
        slot_idx = self._slots(slot_idx, allow_negative=True, check_values=validate)
        B = slot_idx.numel()
        if (not isinstance(accepted, torch.Tensor) or accepted.dtype not in (torch.int32, torch.int64)
                or tuple(accepted.shape) != (B,) or not self._on_device(accepted)):
            raise ValueError(f"accepted must be an int32/int64 tensor of shape ({B},) on {self.device}, got "
                             f"{getattr(accepted, 'dtype', type(accepted).__name__)} "
                             f"{tuple(getattr(accepted, 'shape', ()))}")
        accepted = accepted.to(torch.int32).contiguous()   # the kernels read its memory
        if validate and B:
            valid = slot_idx >= 0
            pend = self.draft_count[slot_idx[valid]]
            if bool((pend == 0).any()):
                raise ValueError("commit without a pending verify: every committed slot needs a verify since its "
                                 "last commit, step or load_state")
            acc = accepted[valid]
            if bool(((acc < 1) | (acc > pend)).any()):
                raise ValueError(f"accepted counts out of range: got {acc.tolist()}, allowed 1..T of each row's "
                                 f"verify (T = {pend.tolist()})")
        commit(self, slot_idx, accepted)

    def _advance(self, slot_idx: torch.Tensor) -> None:
        """Ring counter +1 (0 after a flush) and flush counter +1 on flush, without host syncs."""
        eff = torch.where(slot_idx >= 0, slot_idx, torch.full_like(slot_idx, self.num_slots))
        h = self.ring_count[eff]
        flush = (h + 1) >= self.window
        self.ring_count[eff] = torch.where(flush, torch.zeros_like(h), h + 1)
        self.flush_count[eff] = self.flush_count[eff] + flush.to(torch.int32)
