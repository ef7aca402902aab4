"""KL harness at real-model scale (issue 25): random-weight models of released shapes, bf16 weights.

For each ``--shape`` (a random-weight ``from_config`` model built on the GPU, no download) and each part:

* ``throughput``: one KL batch (``--docs`` documents x the 10 KL variants) on the step path, the chunked
  path (replay variants L tokens per forward; the two conventional variants in a step session) and
  chunked-all (every variant L tokens per forward): decode seconds, row-tokens/s, peak memory per phase; each
  path after an untimed warm-up on the same rows (prefill L, 2 L positions: Triton compiles, graph captures);
* ``agreement``: from the same runs (same tokens and seed), per variant the largest per-position
  |KL_chunked - KL_step| (and chunked-all) and the mean KL;
* ``generate``: generation tokens/s of the lm-eval plugin (what ``downstream`` decodes with) under fp32,
  nvfp4/fp8+sr and conventional:fp8+sr: ``--gen-prompts`` prompts in one batch, ``--gen-tokens`` each;
* ``profile``: after one prefill, ``torch.profiler`` (CPU activity, and CUDA on a GPU) over ``--profile-windows``
  chunked-all windows and ``--profile-steps`` step-path steps of the same rows (each with the KL harness's own
  per-position metrics, as :func:`~replayssm_quant.eval.kl.kl_batch` computes them), after one warm-up unit and
  as many unprofiled ones (their wall time): ``OUT/profile_<tag>.md`` (per path: wall per unit, device kernel
  time, the regions (forward, KL metrics, the SSM calls and a chunked window's parts: host CPU time, linked kernel
  time, device span), kernel launches and host syncs per unit, the top ops by self device and self CPU time)
  and ``.csv`` (every op: path, calls, self / total CPU and device microseconds);
* ``long``: ``--long-docs`` documents x the 10 variants, prefill ``--long-prefill``, ``--long-tokens``
  positions, ``--long-exec`` (default chunked-all), with its wall time (the issue's run: 16 x 10, prefill
  1024, 16384 positions; with ``--long-exec chunked`` the conventional variants take 16384 step forwards).

Writes ``OUT/kl_scale_<shape>.json`` and ``.md``. One device call per shape and part keeps each under the
10-minute limit (the ``long`` part of the 4B shape may need one of its own)::

    source scripts/gpu/setup.sh
    python3 scripts/gpu/kl_scale.py --out "$OUT" --shape qwen3_5_4b --parts throughput,agreement
    python3 scripts/gpu/kl_scale.py --out "$OUT" --shape nemotron_h_8b --parts throughput,agreement --docs 4
    python3 scripts/gpu/kl_scale.py --out "$OUT" --shape qwen3_5_4b --parts long
    python3 scripts/gpu/kl_scale.py --out "$OUT" --shape qwen3_5_4b --parts generate
    python3 scripts/gpu/kl_scale.py --out "$OUT" --shape qwen3_5_4b --parts profile
    python3 scripts/gpu/kl_scale.py --out "$OUT" --shape kimi_linear_48b --parts throughput,agreement --docs 4

``--shape kimi_linear_48b`` (~49B parameters, ~91 GiB in bf16) fits one H200 uncut; should a run of it not fit,
``--layers N`` keeps the first N layers (the report and the file name say so). ``qwen3_next_80b`` (~150 GiB) does
not fit one GPU: ``scripts/gpu/kl_multi_gpu.py`` runs it over two GPUs (or cut, over a GPU and the CPU).
``python3 scripts/gpu/kl_scale_report.py OUT`` turns the ``kl_scale_*.json`` files into ``OUT/README.md``.

``--shape tiny-ARCH`` (tiny random configs) runs the same code on the CPU in seconds (a smoke test).

Memory: each phase records the peak *allocated* and the peak *reserved* by the caching allocator (what
nvidia-smi shows, less the CUDA context). The issue's 127 GB (nvidia-smi) against 29.8 GB peak allocated
of a bare session points at the allocator's reserve: the HF KV cache grows by one ``torch.cat`` per step
and layer, which fragments the reserve; ``--expandable-segments`` sets
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` to measure that. The Nemotron-H shape's prefill goes
through transformers' torch ``mamba2_chunk_scan`` (no mamba_ssm on the machine), whose ``C B^T`` product
materialises ``[docs, chunks, 128, 128, heads, dstate]`` (~7 GB per document at prefill 1024): keep
``--docs`` at 4 or less there.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

if "--expandable-segments" in sys.argv:          # before torch initialises CUDA
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import numpy as np
import torch

from replayssm_quant.eval.data import Document
from replayssm_quant.eval.decode import parse_variant
from replayssm_quant.eval.kl import KLSettings, kl_batch, with_reference
from replayssm_quant.eval.peak_memory import PhaseMemory, gib

KL_VARIANTS = ["bf16", "fp16", "fp8+sr", "nvfp4+sr", "nvfp4/fp16", "nvfp4/fp8+sr", "fp8/fp16",
               "conventional:fp16+sr", "conventional:fp8+sr"]


#: the released shapes ``--shape`` takes (random weights; tiny-ARCH besides)
SHAPES = ("qwen3_5_4b", "nemotron_h_8b", "kimi_linear_48b", "qwen3_next_80b")
#: Kimi-Linear-48B-A3B's MLA (full attention) layers, counted from 1 as its config.json does
KIMI_MLA_LAYERS = (4, 8, 12, 16, 20, 24, 27)


def _pattern(s: str) -> list[str]:
    """Nemotron-H's hybrid_override_pattern (M mamba, - mlp, * attention) as layers_block_type."""
    return [{"M": "mamba", "-": "mlp", "*": "attention"}[c] for c in s]


def shape_config(shape: str):
    """The config of a released model's shape (random weights; sizes from the models' config.json files)."""
    import transformers as T

    if shape == "qwen3_5_4b":
        # Qwen3.5-4B: hidden 2560, 32 layers (3 GDN : 1 attention), GDN 16 key / 32 value heads of 128, vocab 248320
        return T.Qwen3_5TextConfig(
            vocab_size=248320, hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
            num_attention_heads=16, num_key_value_heads=4, head_dim=256, linear_num_value_heads=32,
            linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
            layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 8, tie_word_embeddings=True)
    if shape == "nemotron_h_8b":
        # Nemotron-H-8B: hidden 4096, 52 layers, Mamba-2 128 heads x 64, dstate 128, 8 groups, vocab 131072
        return T.NemotronHConfig(
            vocab_size=131072, hidden_size=4096,
            layers_block_type=_pattern("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"),
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=21504,
            ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64, n_groups=8, expand=2, chunk_size=128,
            use_mamba_kernels=False)
    if shape == "kimi_linear_48b":
        # Kimi-Linear-48B-A3B: hidden 2304, 27 layers (KDA; MLA at layers 4, 8, ..., 24, 27 counted from 1), KDA 32
        # heads of 128, MoE 256 experts (8 active + 1 shared) of 1024, the first layer dense, vocab 163840 (~49B
        # parameters, ~91 GiB in bf16: fits one H200 uncut)
        return T.KimiLinearConfig(
            vocab_size=163840, hidden_size=2304, intermediate_size=9216, moe_intermediate_size=1024,
            num_hidden_layers=27, num_attention_heads=32, num_key_value_heads=32, kv_lora_rank=512, q_lora_rank=None,
            qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, num_local_experts=256, num_experts_per_tok=8,
            n_shared_experts=1, linear_head_dim=128, linear_num_heads=32, linear_conv_kernel_dim=4,
            layer_types=["full_attention" if i + 1 in KIMI_MLA_LAYERS else "linear_attention" for i in range(27)],
            mlp_layer_types=["dense"] + ["sparse"] * 26)
    if shape == "qwen3_next_80b":
        # Qwen3-Next-80B-A3B: hidden 2048, 48 layers (3 GDN : 1 attention), GDN 16 key / 32 value heads of 128,
        # attention 16 heads (2 KV) of 256, MoE 512 experts (10 active + a shared one) of 512, vocab 151936 (~81B
        # parameters, ~150 GiB in bf16: more than one H200)
        return T.Qwen3NextConfig(
            vocab_size=151936, hidden_size=2048, intermediate_size=5120, num_hidden_layers=48,
            num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_num_value_heads=32,
            linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
            num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512, shared_expert_intermediate_size=512,
            decoder_sparse_step=1, layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 12)
    if shape.startswith("tiny-"):
        from replayssm_quant.eval.adapters.tiny import tiny_config
        return tiny_config(shape[len("tiny-"):])
    raise SystemExit(f"unknown --shape {shape!r}: {', '.join(SHAPES)} or tiny-ARCH")


def cut(cfg, layers: int | None):
    """``cfg`` with only its first ``layers`` layers (None: unchanged): the per-layer type lists cut alike."""
    if layers is None:
        return cfg
    n = getattr(cfg, "num_hidden_layers", None)
    if layers < 1 or (n is not None and layers > n):
        raise SystemExit(f"--layers {layers}: the shape has {n} layers")
    for key in ("layer_types", "mlp_layer_types", "layers_block_type"):
        if getattr(cfg, key, None) is not None:
            setattr(cfg, key, list(getattr(cfg, key))[:layers])
    if n is not None:
        cfg.num_hidden_layers = layers
    return cfg


def build(shape: str, dtype: torch.dtype, device: str, memory: PhaseMemory, layers: int | None = None):
    from transformers import AutoModelForCausalLM

    cfg = cut(shape_config(shape), layers)
    with memory.phase("load"):
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval(), cfg.vocab_size


GEN_STATES = ("fp32", "nvfp4/fp8+sr", "conventional:fp8+sr")


def generation_speed(model, prompts: int, tokens: int, device: str, on_state=None) -> dict:
    """Generation tokens/s of the lm-eval plugin (``downstream``'s decoder) per state of :data:`GEN_STATES`:
    ``prompts`` byte-tokenised prompts in one batch, ``tokens`` greedy tokens each (no stop string fires).

    Each state first generates 2 tokens for the same number of prompts (a warm-up: Triton compiles its kernels for
    the batch's launch shapes there; a one-prompt warm-up left the compiles of the batch's shapes in the timing),
    then the timed batch (its prefill and CUDA graph captures included, as in ``downstream``). ``on_state(state, result)``
    is called after each state (progress, incremental results)."""
    from types import SimpleNamespace

    from replayssm_quant.eval.lm_eval_plugin import ReplaySSMLM
    from replayssm_quant.eval.models.tokenizer import build_byte_tokenizer

    def reqs(n, t):
        return [SimpleNamespace(args=(f"Document {i}: " + "the quick brown fox jumps over the lazy dog. " * 4,
                                      {"until": ["\u0000\u0000\u0000"], "max_gen_toks": t})) for i in range(n)]
    out = {}
    for state in GEN_STATES:
        t0 = time.perf_counter()
        lm = ReplaySSMLM(model=model, tokenizer=build_byte_tokenizer(), state=state, device=device,
                         batch_size=prompts, max_batch_tokens=0)
        try:
            lm.generate_until(reqs(prompts, 2), disable_tqdm=True)
            warm = time.perf_counter() - t0
            lm.generation_stats.update(tokens=0, seconds=0.0)
            lm.generate_until(reqs(prompts, tokens), disable_tqdm=True)
        finally:
            lm.session.close()
        out[state] = dict(lm.generation_summary(), rows=prompts, warmup_seconds=warm)
        if on_state is not None:
            on_state(state, out[state])
    return out


def docs_of(n: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, length), generator=g)


def _peaks(mem: PhaseMemory, phase: str) -> str:
    p = mem.peaks.get(phase, {})
    return f"{gib(p.get('peak_allocated_bytes'))} / {gib(p.get('peak_reserved_bytes'))}"


def one_batch(model, tokens, variants, st, memory):
    t0 = time.perf_counter()
    res, secs = kl_batch(model, tokens, variants, st, seed=1, memory=memory)
    return res, secs, time.perf_counter() - t0


#: profiler keys that are (or on a GPU would be) host syncs, and the runtime calls that launch device work
SYNC_KEYS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::item",
             "aten::_local_scalar_dense", "aten::nonzero", "aten::unique", "aten::_unique2")
LAUNCH_KEYS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
               "cudaMemcpyAsync", "cudaMemsetAsync")
PROFILE_TOP = 25
#: record_function regions: the script's (forward, kl_metrics), DecodeSession's per-layer SSM calls and
#: kernels/chunked.py's parts of a chunked window
REGIONS = ("replayssm::forward", "replayssm::kl_metrics", "replayssm::ssm_chunk", "replayssm::ssm_step",
           "replayssm::window_reads", "replayssm::fill_ring", "replayssm::flush")


#: aten ops that only make views (no device work), left out of the op counts
VIEW_OPS = frozenset("aten::" + x for x in ("select", "slice", "view", "unsqueeze", "squeeze", "transpose", "permute",
                                            "as_strided", "expand", "alias", "t", "narrow", "lift_fresh", "detach",
                                            "unbind", "split", "_unsafe_view", "view_as", "expand_as", "chunk"))


def _top_level_ops(prof) -> dict[str, int]:
    """Top-level ``aten::`` calls (no aten parent; view-only ops left out) per innermost enclosing ``replayssm::``
    region ("other" outside)."""
    out: dict[str, int] = {}
    for e in prof.events():
        if not e.name.startswith("aten::") or e.name in VIEW_OPS:
            continue
        p = e.cpu_parent
        if p is not None and p.name.startswith("aten::"):
            continue
        while p is not None and not p.name.startswith("replayssm::"):
            p = p.cpu_parent
        key = "other" if p is None else p.name
        out[key] = out.get(key, 0) + 1
    return out


def _op_rows(prof, path: str) -> list[dict]:
    """Every op of ``prof.key_averages()``: calls, self / total CPU and device microseconds."""
    rows = []
    for e in prof.key_averages():
        rows.append({"path": path, "op": e.key, "calls": e.count, "self_cpu_us": e.self_cpu_time_total,
                     "cpu_total_us": e.cpu_time_total,
                     "self_device_us": getattr(e, "self_device_time_total", 0.0) or 0.0,
                     "device_total_us": getattr(e, "device_time_total", 0.0) or 0.0,
                     "on_device": str(getattr(e, "device_type", "")).endswith("CUDA")})
    return rows


def profile_paths(model, tokens, variants, args, backend: str, device: str,
                  on_path=None) -> tuple[dict, list[dict], list[str]]:
    """Part ``profile``: per path (chunked-all windows, step-path steps) one session over ``tokens [D, P + ...]``:
    prefill, one warm-up unit, ``n`` unprofiled units (wall), ``n`` profiled ones. A unit is one model forward (a
    window of L tokens / one token) plus the KL metrics of its positions, as ``kl_batch`` does them.
    Returns ``(summary per path, op rows, markdown lines)``; ``on_path`` gets the same after each path (incremental
    results)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from replayssm_quant.eval.decode import DecodeSession
    from replayssm_quant.eval.kl_stats import position_metrics

    P, D, n_var = args.prefill, tokens.shape[0], len(variants)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    summary, rows, lines = {}, [], []
    for path, n_units in (("chunked-all", args.profile_windows), ("step", args.profile_steps)):
        with DecodeSession(model, variants, window=args.window, seed=1, backend=backend,
                           exec_mode="step" if path == "step" else path) as s:
            logits = s.prefill(tokens[:, :P])
            toks_in, toks = tokens.to(input_device_of(model)), tokens.to(logits.device)
            C = 1 if path == "step" else s.chunk_tokens()

            def unit(i):
                c0 = P + i * C
                with record_function("replayssm::forward"):
                    lg = s.feed(toks_in[:, c0:c0 + C]) if path != "step" else s.step(toks_in[:, c0])[:, None]
                with record_function("replayssm::kl_metrics"):
                    for j in range(C):
                        position_metrics(lg[:, j:j + 1].reshape(n_var, D, 1, -1), toks[:, c0 + j + 1:c0 + j + 2])

            unit(0)                                                   # warm-up: Triton compiles, CUDA graphs
            _sync_dev(device)
            walls = []
            for i in range(1, 1 + n_units):
                t0 = time.perf_counter()
                unit(i)
                _sync_dev(device)
                walls.append(time.perf_counter() - t0)
            wall = sum(walls) / n_units
            with profile(activities=acts) as prof:
                for i in range(1 + n_units, 1 + 2 * n_units):
                    unit(i)
                _sync_dev(device)
        print(f"profile {path}: {wall * 1e3:.1f} ms per unit unprofiled ({', '.join(f'{w * 1e3:.0f}' for w in walls)})",
              flush=True)
        ops = _op_rows(prof, path)
        rows += ops
        # a region appears twice on a GPU: the host-side range (its CPU time, the device time of the kernels the
        # profiler links to the ops inside it) and the device-side annotation (first to last kernel: its span)
        by = {r["op"]: r for r in ops if not r["on_device"]}
        span = {r["op"]: r for r in ops if r["on_device"] and r["op"].startswith("replayssm::")}
        per = 1.0 / n_units
        dev_kernels = sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))
        launches = {k: by[k]["calls"] * per for k in LAUNCH_KEYS if k in by}
        syncs = {k: by[k]["calls"] * per for k in SYNC_KEYS if k in by}
        htod = sum(1 for e in prof.events() if e.name.startswith("Memcpy HtoD") and "Pageable" in e.name) * per
        if htod:
            syncs["Memcpy HtoD (Pageable -> Device)"] = htod
        ops_in = _top_level_ops(prof)
        split = {k.split("::")[1]: {"cpu_ms": by[k]["cpu_total_us"] * per / 1e3,
                                    "device_ms": by[k]["device_total_us"] * per / 1e3,
                                    "device_span_ms": span[k]["device_total_us"] * per / 1e3 if k in span else None,
                                    "calls": by[k]["calls"] * per, "top_level_ops": ops_in.get(k, 0) * per}
                 for k in REGIONS if k in by}
        kernels = [r for r in ops if r["on_device"] and not r["op"].startswith("replayssm::")]
        unit_name = "window" if path != "step" else "step"
        summary[path] = {"unit": unit_name, "tokens_per_unit": C, "rows": n_var * D, "units_profiled": n_units,
                         "wall_s_per_unit_unprofiled": wall, "unit_walls_s": walls,
                         "row_tokens_per_s_unprofiled": n_var * D * C / wall,
                         "device_events_per_unit": dev_kernels * per, "launch_calls_per_unit": launches,
                         "host_sync_ops_per_unit": syncs, "split_per_unit": split,
                         "kernel_ms_per_unit": sum(r["self_device_us"] for r in kernels) * per / 1e3,
                         "self_cpu_ms_per_unit": sum(r["self_cpu_us"] for r in ops) * per / 1e3}
        sm = summary[path]
        lines += [f"## {path}: {n_var * D} rows, {C} token(s) per {unit_name}", "",
                  f"- wall per {unit_name} (unprofiled, {n_units} of them after a warm-up): **{wall * 1e3:.1f} ms**, "
                  f"{sm['row_tokens_per_s_unprofiled']:.0f} row-tokens/s",
                  f"- regions per {unit_name} (times include nested regions; CPU ms: host time inside the region, "
                  "profiled; kernel ms: device time of the kernels the profiler links to ops inside it (Triton "
                  "launches are not linked); span ms: first to last device event of the region, idle gaps included; "
                  "ops: top-level aten calls directly inside the region, outside nested ones, view-only ops left out: "
                  "about one launch each on a GPU; inside flush on the CPU they are the torch reference's, on a GPU "
                  "the Triton step's):", "",
                  "| region | calls | CPU ms | kernel ms | span ms | top-level ops |", "|---|---|---|---|---|---|",
                  *[f"| {k} | {v['calls']:.0f} | {v['cpu_ms']:.1f} | {v['device_ms']:.1f} | "
                    f"{'n/a' if v['device_span_ms'] is None else format(v['device_span_ms'], '.1f')} | "
                    f"{v['top_level_ops']:.0f} |" for k, v in split.items()], "",
                  f"- per {unit_name}: self CPU {sm['self_cpu_ms_per_unit']:.1f} ms (profiled), device kernels "
                  f"{sm['kernel_ms_per_unit']:.1f} ms, device events {sm['device_events_per_unit']:.0f}",
                  "- launch calls per " + unit_name + ": " + (", ".join(f"{k} {v:.0f}" for k, v in launches.items())
                                                              or "none (CPU)"),
                  "- host-sync ops per " + unit_name + ": " + (", ".join(f"{k} {v:.1f}" for k, v in syncs.items())
                                                               or "none"), ""]
        for col, title in (("self_device_us", "self device time"), ("self_cpu_us", "self CPU time")):
            top = sorted((r for r in ops if r[col] > 0 and not r["op"].startswith("replayssm::")),
                         key=lambda r: -r[col])[:PROFILE_TOP]
            if not top:
                continue
            lines += [f"Top {len(top)} ops by {title} (per {unit_name}):", "",
                      f"| op | calls / {unit_name} | self device ms | self CPU ms |", "|---|---|---|---|"]
            lines += [f"| `{r['op'][:90]}` | {r['calls'] * per:.1f} | {r['self_device_us'] * per / 1e3:.3f} | "
                      f"{r['self_cpu_us'] * per / 1e3:.3f} |" for r in top]
            lines.append("")
        if on_path is not None:
            on_path(summary, rows, lines)
    return summary, rows, lines


class LongProgress:
    """The long part's progress in place of :func:`~replayssm_quant.eval.kl.run_kl`'s tqdm bar: ``path`` (JSON)
    rewritten at each batch start and at most every ``every`` seconds of decoded positions, so a run cut off
    says how far it got: the batch, positions decoded in it, seconds since its start (prefill included) and since
    its first decoded unit, and the row-tokens/s of its positions after the first unit."""

    def __init__(self, path: str, every: float = 5.0):
        self.path, self.every = path, every
        self.t_part = time.perf_counter()
        self.state: dict = {"batches_started": 0}
        self.t_first, self.first_n = None, 0
        self._last = 0.0

    def _write(self) -> None:
        now = time.perf_counter()
        st = self.state
        st["elapsed_s_part"] = now - self.t_part
        if "t_batch" in self.__dict__:
            st["elapsed_s_batch"] = now - self.t_batch
        if st.get("positions", 0) and self.t_first is not None and now > self.t_first:
            after = st["positions"] - self.first_n
            st["decode_s_after_first_unit"] = now - self.t_first
            st["row_tokens_per_s_so_far"] = st["rows"] * after / (now - self.t_first) if st.get("rows") else None
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(st, f, indent=1)
        os.replace(tmp, self.path)
        self._last = now

    def set_postfix_str(self, text: str) -> None:
        import re
        m = re.search(r"batch (\d+)/(\d+), (\d+) variants x (\d+) docs", text)
        self.t_batch, self.t_first, self.first_n = time.perf_counter(), None, 0
        self.state.update(batch=text, positions=0, batches_started=self.state["batches_started"] + 1,
                          rows=int(m.group(3)) * int(m.group(4)) if m else None)
        self._write()
        print(f"long: {text}", flush=True)

    def update(self, n: int) -> None:
        self.state["positions"] = self.state.get("positions", 0) + n
        if self.t_first is None:
            self.t_first, self.first_n = time.perf_counter(), self.state["positions"]
        if time.perf_counter() - self._last >= self.every:
            self._write()
            print(f"long: {self.state['positions']} positions, {self.state.get('row_tokens_per_s_so_far') or 0:.0f} "
                  f"row-tokens/s so far", flush=True)

    def close(self) -> None:
        self.state["closed"] = True
        self._write()


def long_part(model, vocab: int, variants, args, backend: str, tag: str) -> dict:
    """Part ``long`` through the KL harness's resumable store (:class:`~replayssm_quant.eval.results.ResultsStore`
    and :func:`~replayssm_quant.eval.kl.run_kl`): ``--long-docs`` documents in ``--long-doc-groups`` batches, each
    batch's records written when it is done (``OUT/long_<tag>/records``, timing in ``batches/``); with ``--resume``
    a rerun into the same folder skips the finished batches. ``OUT/long_progress_<tag>.json`` says how far the
    batch in flight got (:class:`LongProgress`)."""
    from replayssm_quant.eval.kl import run_kl
    from replayssm_quant.eval.results import ResultsStore

    D, G = args.long_docs, args.long_doc_groups
    if G < 1 or D % G:
        raise SystemExit(f"--long-doc-groups {G} must divide --long-docs {D}")
    tokens = docs_of(D, args.long_prefill + args.long_tokens + 1, vocab, seed=1)
    docs = [Document(f"random-seed1#{i}", tokens[i]) for i in range(D)]
    root = os.path.join(args.out, f"long_{tag}")
    if os.path.isdir(os.path.join(root, "records")) and not args.resume:
        raise SystemExit(f"{root} holds records of an earlier long run: pass --resume to continue it, or another --out")
    st = KLSettings(prefill=args.long_prefill, tokens=args.long_tokens, window=args.window, seed=1, backend=backend,
                    exec_mode=args.long_exec, batch_docs=D // G)
    config = {"model": f"random:{args.shape}" + ("" if args.layers is None else f":L{args.layers}"),
              "model_hash": f"torch.manual_seed(0) from_config {args.shape} {args.dtype}", "weights_dtype": args.dtype,
              "data": f"random tokens (seed 1, vocab {vocab})", "text_field": None, "prefill": args.long_prefill,
              "tokens": args.long_tokens, "window": args.window, "seed": 1, "batch_docs": D // G,
              "variants": [v.label for v in variants], "docs": D, "exec": args.long_exec, "dtype": args.dtype,
              "command": "python3 scripts/gpu/kl_scale.py " + shlex.join(sys.argv[1:]),
              "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    mem = PhaseMemory()
    t0 = time.perf_counter()
    with ResultsStore(root) as store:
        store.open(config, docs)
        before = len(store.batches())
        summary = run_kl(model, docs, variants, st, store, memory=mem,
                         bar=LongProgress(os.path.join(args.out, f"long_progress_{tag}.json")))
        store.update_config(memory=mem.as_dict())     # the report's "Peak memory" line (this call's phases)
        batches, records = store.batches(), store.records()
    wall = time.perf_counter() - t0
    secs = sum(b["decode_seconds"] for b in batches)
    row_tokens = sum(b["rows"] * b["decode_steps"] for b in batches)
    mean_kl: dict[str, list[float]] = {}
    for meta, _ in records:
        mean_kl.setdefault(meta["variant"], []).append(meta["mean_kl"])
    total = len(variants) * D * args.long_tokens
    whole = before == 0 and len(batches) == G          # the whole run in this call: its wall is the run's
    return {"docs": D, "doc_groups": G, "wall_seconds": wall if whole else None, "prefill": args.long_prefill, "tokens": args.long_tokens,
            "exec": args.long_exec, "batches_done": len(batches), "batches_done_before": before,
            "batches_this_call": summary["batches"], "wall_seconds_this_call": wall,
            "decode_seconds_done_batches": secs, "row_tokens_done": row_tokens,
            "row_tokens_per_s": row_tokens / secs if secs > 0 else None,
            "decode_seconds_all_estimate": total * secs / row_tokens if row_tokens else None,
            "batch_walls": batches, "memory": mem.as_dict(),
            "mean_kl": {k: float(np.mean(v)) for k, v in mean_kl.items()},
            "docs_per_variant": {k: len(v) for k, v in mean_kl.items()}}


def long_lines(lg: dict, n_var: int) -> list[str]:
    est = lg["decode_seconds_all_estimate"]
    return [f"long: {lg['docs']} docs x {n_var} variants, prefill {lg['prefill']}, {lg['tokens']} positions, "
            f"{lg['exec']}, {lg['doc_groups']} document batches: {lg['batches_done']} done "
            f"({lg['batches_this_call']} in this call, wall {lg['wall_seconds_this_call']:.0f} s); decode "
            f"{lg['decode_seconds_done_batches']:.0f} s for {lg['row_tokens_done']} row-tokens"
            + (f" = {lg['row_tokens_per_s']:.0f} row-tokens/s; all {lg['doc_groups']} batches at that rate: "
               f"**{est / 60:.1f} min** of decode (goal <= 8 min wall)" if est else ""), ""]


def _sync_dev(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def input_device_of(model):
    from replayssm_quant.eval.placement import input_device
    return input_device(model)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="qwen3_5_4b")
    ap.add_argument("--parts", default="throughput,agreement")
    ap.add_argument("--paths", default="step,chunked,chunked-all",
                    help="part throughput: the execution paths timed (agreement needs all three)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--layers", type=int, default=None,
                    help="keep only the first N layers (a shape that does not fit one GPU; the report says so)")
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--prefill", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--long-docs", type=int, default=16)
    ap.add_argument("--long-prefill", type=int, default=1024)
    ap.add_argument("--long-tokens", type=int, default=16384)
    ap.add_argument("--long-exec", default="chunked-all", choices=["chunked", "chunked-all", "step"])
    ap.add_argument("--long-doc-groups", type=int, default=1,
                    help="part long: the documents in this many batches, each written when done")
    ap.add_argument("--resume", action="store_true", help="part long: continue the run in OUT/long_<tag>/")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--gen-prompts", type=int, default=16, help="part generate: prompts in the batch")
    ap.add_argument("--gen-tokens", type=int, default=256, help="part generate: tokens generated per prompt")
    ap.add_argument("--profile-windows", type=int, default=3, help="part profile: chunked-all windows profiled")
    ap.add_argument("--profile-steps", type=int, default=4, help="part profile: step-path steps profiled")
    ap.add_argument("--expandable-segments", action="store_true",
                    help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (allocator fragmentation check)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    paths = args.paths.split(",")
    if not set(paths) <= {"step", "chunked", "chunked-all"} or ("agreement" in parts and len(set(paths)) < 3):
        raise SystemExit(f"--paths takes step, chunked, chunked-all (all three for part agreement), got {args.paths!r}")
    graphs = os.environ.get("REPLAYSSM_CUDA_GRAPHS", "1") != "0"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "triton" if device == "cuda" else "torch"
    os.makedirs(args.out, exist_ok=True)
    memory = PhaseMemory()
    model, vocab = build(args.shape, getattr(torch, args.dtype), device, memory, args.layers)
    n_params = sum(p.numel() for p in model.parameters())
    full_layers = getattr(shape_config(args.shape), "num_hidden_layers", None)
    variants = with_reference([parse_variant(v) for v in KL_VARIANTS])
    result = {"shape": args.shape, "params": n_params, "dtype": args.dtype, "device": device,
              "layers": args.layers, "shape_layers": full_layers,
              "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "cuda_graphs": graphs,
              "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "variants": [v.label for v in variants],
              "load_memory": memory.as_dict()}
    cut_note = "" if args.layers is None else f", **cut to its first {args.layers} of {full_layers} layers**"
    lines = [f"# KL harness at scale: {args.shape} ({n_params / 1e9:.2f}B parameters{cut_note}, {args.dtype} weights, "
             f"random), {result['gpu']}", ""]
    tag = (args.shape + ("" if args.layers is None else f"_L{args.layers}")
           + ("" if parts not in ({"long"}, {"generate"}, {"profile"}) else "_" + next(iter(parts)))
           + ("_expseg" if args.expandable_segments else "") + ("" if graphs else "_nographs"))
    if parts & {"throughput", "agreement"}:
        tokens = docs_of(args.docs, args.prefill + args.tokens + 1, vocab, seed=0)
        runs = {}
        for ex in paths:
            mem = PhaseMemory()
            st = KLSettings(prefill=args.prefill, tokens=args.tokens, window=args.window, seed=1, backend=backend,
                            exec_mode=ex)
            # warm-up on the same rows (Triton compiles per launch configuration, CUDA graph captures), not timed:
            # a short prefill and two windows, the first-use costs a measured run would otherwise include
            W = args.window
            warm_st = KLSettings(prefill=W, tokens=2 * W, window=W, seed=1, backend=backend, exec_mode=ex)
            t_w = time.perf_counter()
            one_batch(model, docs_of(args.docs, 3 * W + 1, vocab, seed=3), variants, warm_st, PhaseMemory())
            warm_s = time.perf_counter() - t_w
            print(f"throughput {ex} (after a {warm_s:.1f} s warm-up) ...", flush=True)
            res, secs, wall = one_batch(model, tokens, variants, st, mem)
            rows = len(variants) * args.docs
            print(f"throughput {ex}: decode {secs:.1f} s, {rows * args.tokens / secs:.0f} row-tokens/s", flush=True)
            runs[ex] = res
            result[ex] = {"decode_seconds": secs, "wall_seconds": wall, "rows": rows, "warmup_seconds": warm_s,
                          "row_tokens_per_s": rows * args.tokens / secs, "memory": mem.as_dict()}
            lines.append(f"{ex}: {rows} rows x {args.tokens} positions after prefill {args.prefill}: decode "
                         f"{secs:.1f} s, **{rows * args.tokens / secs:.0f} row-tokens/s**, wall {wall:.1f} s; peak "
                         f"allocated / reserved: prefill {_peaks(mem, 'prefill')}, decode {_peaks(mem, 'decode')}")
        for ex in [p for p in ("chunked", "chunked-all") if p in result and "step" in result]:
            result[f"{ex}_over_step"] = result[ex]["row_tokens_per_s"] / result["step"]["row_tokens_per_s"]
            lines.append(f"{ex} / step row-tokens/s: **{result[f'{ex}_over_step']:.2f}x** (goal >= 8x)")
        lines.append("")
        if "agreement" in parts:
            lines += ["| variant | mean KL step | mean KL chunked | max abs(KL chunked - KL step) | same, chunked-all |",
                      "|---|---|---|---|---|"]
            agree = {}
            for i, v in enumerate(variants[1:], 1):
                d = float(np.abs(runs["chunked"]["kl"][i] - runs["step"]["kl"][i]).max())
                d_all = float(np.abs(runs["chunked-all"]["kl"][i] - runs["step"]["kl"][i]).max())
                agree[v.label] = {"mean_kl_step": float(runs["step"]["kl"][i].mean()),
                                  "mean_kl_chunked": float(runs["chunked"]["kl"][i].mean()),
                                  "max_abs_dkl": d, "max_abs_dkl_chunked_all": d_all}
                lines.append(f"| {v.label} | {agree[v.label]['mean_kl_step']:.4g} | "
                             f"{agree[v.label]['mean_kl_chunked']:.4g} | {d:.3g} | {d_all:.3g} |")
            result["agreement"] = agree
            lines.append("")
    if "generate" in parts:
        def gen_progress(state, g):
            print(f"generate {state}: {g['tokens']} tokens in {g['seconds']:.1f} s ({g['tokens_per_s']:.1f} tokens/s; "
                  f"warm-up {g['warmup_seconds']:.1f} s)", flush=True)
            result.setdefault("generate", {})[state] = g
            with open(os.path.join(args.out, f"kl_scale_{tag}.json"), "w") as f:   # incremental
                json.dump(result, f, indent=1)
        print(f"generate: {len(GEN_STATES)} states x {args.gen_prompts} prompts x {args.gen_tokens} tokens", flush=True)
        result["generate"] = generation_speed(model, args.gen_prompts, args.gen_tokens, device, gen_progress)
        lines += ["| state | rows | tokens generated | seconds | tokens/s |", "|---|---|---|---|---|"]
        lines += [f"| {k} | {g['rows']} | {g['tokens']} | {g['seconds']:.1f} | **{g['tokens_per_s']:.0f}** |"
                  for k, g in result["generate"].items()]
        lines += ["(the lm-eval plugin's generate_until, as `downstream` runs it: greedy, prefill and CUDA graph "
                  "captures included, after a 2-token warm-up per state)", ""]
    if "profile" in parts:
        need = args.prefill + args.window * (1 + 2 * max(args.profile_windows, args.profile_steps)) + 1
        tokens = docs_of(args.docs, need, vocab, seed=2)
        ptag = args.shape + ("" if args.layers is None else f"_L{args.layers}")
        head = [f"# Profile: {args.shape} ({n_params / 1e9:.2f}B parameters{cut_note}, {args.dtype} weights), "
                f"{result['gpu']}, {args.docs} docs x {len(variants)} variants, prefill {args.prefill}, "
                f"L = {args.window}", ""]

        def write_profile(summary, op_rows, plines):
            import pandas as pd
            with open(os.path.join(args.out, f"profile_{ptag}.md"), "w") as f:
                f.write("\n".join(head + plines) + "\n")
            pd.DataFrame(op_rows).to_csv(os.path.join(args.out, f"profile_{ptag}.csv"), index=False)
            result["profile"] = summary
            with open(os.path.join(args.out, f"kl_scale_{tag}.json"), "w") as f:
                json.dump(result, f, indent=1)
        summary, op_rows, plines = profile_paths(model, tokens, variants, args, backend, device, write_profile)
        for path, sm in summary.items():
            lines.append(f"profile {path}: {sm['wall_s_per_unit_unprofiled'] * 1e3:.1f} ms per {sm['unit']} "
                         f"({sm['row_tokens_per_s_unprofiled']:.0f} row-tokens/s unprofiled), "
                         f"device events {sm['device_events_per_unit']:.0f} per {sm['unit']} "
                         f"(profile_{ptag}.md)")
        lines.append("")
    if "long" in parts:
        result["long"] = long_part(model, vocab, variants, args, backend, tag)
        lines += long_lines(result["long"], len(variants))
    lines.append(f"load: {_peaks(memory, 'load')} (allocator conf {result['alloc_conf'] or 'default'})")
    with open(os.path.join(args.out, f"kl_scale_{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"kl_scale_{tag}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
