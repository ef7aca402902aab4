"""The KL harness on a model spread over devices with accelerate's device_map (issue 31), random weights, bf16.

Two GPUs (the default; ``nvidia-h200-x2``), one device call per part:

* ``--parts full``: Qwen3-Next-80B-A3B's shape (~81B parameters, ~150 GiB in bf16: more than one H200) built
  straight onto the GPUs as ``--device-map auto`` places it (``get_balanced_memory`` + ``infer_auto_device_map``,
  what ``from_pretrained(device_map="auto")`` does; the blocks are materialised on their GPU and initialised
  there, no checkpoint), then one KL batch on the step and the chunked path: the layer placement, that every SSM
  layer's caches and CUDA graph live on that layer's GPU, peak memory per GPU, row-tokens/s;
* ``--parts compare``: the same shape cut to its first ``--cut-layers`` layers (fits one GPU): the KL batch on
  one GPU, then the same model (same weights) spread half / half over the two GPUs: per-position KL of the split
  run against the one-GPU run (goal: within 1e-6), speeds and peak memory of both.

One GPU, ``--one-gpu-cpu-split``: the cut model on the GPU, then the same model with its second half of layers
(and the lm_head) offloaded to the CPU (device_map ``"cpu"`` entries: the weights stay in host memory and run on
the GPU, streamed per forward): KL per position against the GPU-only run, the placement check (the offloaded
layers' caches and graphs on the GPU they run on, their parameters on the meta device), speeds and memory.

Without a GPU (a smoke test, ``--shape tiny-qwen3_next``): both "GPUs" are the CPU (accelerate's hooks still
move every activation) and ``disk`` entries stand in for the CPU offload.

Writes ``OUT/kl_multi_gpu_<part>.json`` and ``.md`` and ``OUT/README.md`` (:mod:`replayssm_quant.eval.scale_report`,
together with any ``kl_scale_*.json`` there)::

    source scripts/gpu/setup.sh
    python3 scripts/gpu/kl_multi_gpu.py --out "$OUT" --parts full          # nvidia-h200-x2 (estimated ~4 min)
    python3 scripts/gpu/kl_multi_gpu.py --out "$OUT" --parts compare       # nvidia-h200-x2 (estimated ~4 min)
    python3 scripts/gpu/kl_multi_gpu.py --out "$OUT" --one-gpu-cpu-split   # nvidia-h200 (estimated ~3 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kl_scale import KL_VARIANTS, cut, docs_of, shape_config  # noqa: E402

from replayssm_quant.eval.adapters import ssm_layers  # noqa: E402
from replayssm_quant.eval.decode import DecodeSession, parse_variant  # noqa: E402
from replayssm_quant.eval.kl import KLSettings, kl_batch, with_reference  # noqa: E402
from replayssm_quant.eval.peak_memory import PhaseMemory, gib  # noqa: E402
from replayssm_quant.eval.placement import block_placement, execution_device  # noqa: E402
from replayssm_quant.eval.scale_report import build_scale_report  # noqa: E402

SHAPES = ("qwen3_next_80b", "qwen3_5_4b", "kimi_linear_48b", "tiny-qwen3_next", "tiny-qwen3_5", "tiny-kimi_linear")


def materialise(cfg, dtype, device_map: dict):
    """A random-weight model of ``cfg`` built on the meta device, each block of ``device_map`` materialised on its
    device and initialised there (seeded; no host copy of the whole model)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    for name, dev in device_map.items():
        (model.get_submodule(name) if name else model).to_empty(device=dev)
    torch.manual_seed(0)
    model.initialize_weights()
    model.tie_weights()
    return model.eval()


def auto_map(cfg, dtype, gpus: list[int], reserve_gib: float) -> dict:
    """What ``device_map="auto"`` gives over ``gpus``, keeping ``reserve_gib`` per GPU free for the harness."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import get_balanced_memory
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    cap = {g: int(torch.cuda.get_device_properties(g).total_memory - reserve_gib * 2 ** 30) for g in gpus}
    kw = dict(no_split_module_classes=model._no_split_modules, dtype=dtype)
    return infer_auto_device_map(model, max_memory=get_balanced_memory(model, max_memory=cap, **kw), **kw)


def half_map(n: int, first, second) -> dict:
    """Of a model of ``n`` layers: the embeddings and the first half of the layers on ``first``, the rest (norm,
    lm_head) on ``second``."""
    dm = {"model.embed_tokens": first, "model.rotary_emb": first}
    dm.update({f"model.layers.{i}": first if i < n // 2 else second for i in range(n)})
    dm.update({"model.norm": second, "lm_head": second})
    return dm


def spread(model, device_map: dict, main):
    """Dispatch an in-memory model over ``device_map`` (accelerate hooks); blocks mapped to ``"cpu"`` / ``"disk"``
    are offloaded (moved to the host first, so their weights leave the GPU)."""
    from accelerate import dispatch_model

    for name, dev in device_map.items():
        if dev in ("cpu", "disk"):
            model.get_submodule(name).to("cpu")
    folder = tempfile.mkdtemp(prefix="replayssm-offload-") if "disk" in device_map.values() else None
    return dispatch_model(model, device_map, main_device=main, offload_dir=folder, force_hooks=True)


def placement_by_device(model) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, dev in block_placement(model).items():
        out.setdefault(dev, []).append(name or "(all)")
    return out


def layer_check(model, variants, tokens, st: KLSettings) -> dict:
    """A session over ``variants``: prefill, three steps (the first captures each layer's CUDA graph, the next
    replay it); then per SSM layer whether every cache tensor, the graph and its buffers are on the layer's
    execution device (a GPU layer must have its graph)."""
    layers = {idx: m for idx, m, _ in ssm_layers(model)}
    with DecodeSession(model, variants, window=st.window, seed=1, backend=st.backend, cuda_graphs=st.cuda_graphs,
                       exec_mode="step") as s:
        s.prefill(tokens[:, :st.prefill])
        for t in range(3):
            s.step(tokens[:, st.prefill + t])
        place = s.placement()
    bad, graphs, detail = [], 0, {}
    for idx, p in place.items():
        dev = str(execution_device(model, layers[idx]))
        want_graph = dev.startswith("cuda") and st.cuda_graphs
        ok = p["cache_devices"] == [dev] and (p["graph_device"] == dev if want_graph else p["graph_device"] is None)
        ok = ok and p["graph_buffers"] in (None, [dev])
        graphs += p["graph_device"] is not None
        params = sorted({str(q.device) for q in layers[idx].parameters()})
        detail[idx] = dict(p, execution_device=dev, parameter_devices=params)
        if not ok:
            bad.append(idx)
    return {"layers": len(place), "ok": len(place) - len(bad), "bad": bad, "graphs": graphs, "per_layer": detail}


def run_execs(model, tokens, variants, st: KLSettings, execs) -> dict:
    out = {}
    for ex in execs:
        mem = PhaseMemory()
        res, secs = kl_batch(model, tokens, variants, KLSettings(**{**vars(st), "exec_mode": ex}), seed=1, memory=mem)
        rows = len(variants) * tokens.shape[0]
        out[ex] = {"decode_seconds": secs, "rows": rows, "row_tokens_per_s": rows * st.tokens / secs,
                   "memory": mem.as_dict(), "kl": res["kl"], "mean_kl": {v.label: float(res["kl"][i].mean())
                                                                         for i, v in enumerate(variants)}}
    return out


def _public(runs: dict) -> dict:
    return {name: {"exec": {ex: {k: v for k, v in x.items() if k != "kl"} for ex, x in r.items()}}
            for name, r in runs.items()}


def _md(result: dict) -> str:
    L = [f"# {result['title']}", "", f"`{result['command']}`", ""]
    for name, r in result["runs"].items():
        for ex, x in r["exec"].items():
            per = x["memory"].get("decode", {}).get("peak_allocated_bytes_per_gpu")
            L.append(f"- {name}, {ex}: {x['row_tokens_per_s']:.0f} row-tokens/s ({x['rows']} rows), decode peak "
                     f"allocated per GPU: {', '.join(gib(b) for b in per) if per else 'n/a'}")
    if "layer_check" in result:
        c = result["layer_check"]
        L.append(f"- SSM layers with caches and graph on their device: {c['ok']} of {c['layers']} (graphs {c['graphs']})")
    if "kl_compare" in result:
        L.append(f"- max abs dKL per position {result['kl_compare']['split']} vs one device: "
                 + ", ".join(f"{ex} {d:.3g}" for ex, d in result["kl_compare"]["max_abs_dkl"].items()))
    return "\n".join(L + [f"- {n}" for n in result.get("notes", [])]) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="qwen3_next_80b", choices=SHAPES)
    ap.add_argument("--parts", default="full,compare", help="full, compare (two GPUs)")
    ap.add_argument("--one-gpu-cpu-split", action="store_true",
                    help="one GPU: the cut model on the GPU vs the same with its second half offloaded to the CPU")
    ap.add_argument("--cut-layers", type=int, default=None,
                    help="layers of the model compared with one device (default: 24 for two GPUs, 8 for the CPU split)")
    ap.add_argument("--docs", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--reserve-gib", type=float, default=24.0, help="per-GPU memory device_map auto leaves free")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    ngpu = torch.cuda.device_count()
    parts = ["cpu_split"] if args.one_gpu_cpu_split else [p for p in args.parts.split(",") if p]
    if any(p not in ("full", "compare", "cpu_split") for p in parts):
        raise SystemExit(f"--parts {args.parts!r}: full and/or compare")
    if cuda and not args.one_gpu_cpu_split and ngpu < 2:
        raise SystemExit(f"{ngpu} GPU visible: --parts {args.parts} needs two; use --one-gpu-cpu-split on one GPU")
    if not cuda and not args.shape.startswith("tiny-"):
        raise SystemExit("no GPU: only the tiny shapes run on the CPU (--shape tiny-qwen3_next)")
    os.makedirs(args.out, exist_ok=True)
    dtype = torch.bfloat16 if cuda else torch.float32
    first, second = (0, 1) if cuda else ("cpu", "cpu")
    main_dev = "cuda:0" if cuda else "cpu"
    offload = "cpu" if cuda else "disk"
    variants = with_reference([parse_variant(v) for v in KL_VARIANTS])
    st = KLSettings(prefill=args.prefill, tokens=args.tokens, window=args.window, seed=1, backend=None)
    cfg_full = shape_config(args.shape)
    vocab = cfg_full.vocab_size
    tokens = docs_of(args.docs, args.prefill + args.tokens + 1, vocab, seed=0)
    command = "python3 scripts/gpu/kl_multi_gpu.py " + shlex.join(sys.argv[1:])
    gpu = torch.cuda.get_device_name(0) if cuda else "cpu"
    for part in parts:
        t0 = time.perf_counter()
        notes: list[str] = []
        result = {"part": part, "shape": args.shape, "gpu": gpu, "gpus": ngpu, "dtype": str(dtype).split(".")[-1],
                  "command": command, "docs": args.docs, "prefill": args.prefill, "tokens": args.tokens,
                  "variants": [v.label for v in variants]}
        if part == "full":
            dm = (auto_map(cfg_full, dtype, [0, 1], args.reserve_gib) if cuda
                  else half_map(cfg_full.num_hidden_layers, first, second))
            model = spread(materialise(cfg_full, dtype, dm), dm, main_dev)
            n = sum(p.numel() for p in model.parameters())
            result["title"] = (f"{args.shape} ({n / 1e9:.1f}B parameters, {result['dtype']}, random) with device_map "
                               f"auto over {ngpu if cuda else 'two CPU'} devices, {gpu}")
            result["params"] = n
            result["placement"] = placement_by_device(model)
            result["layer_check"] = layer_check(model, variants, tokens, st)
            runs = {"spread": run_execs(model, tokens, variants, st, ("step", "chunked"))}
            if cuda:
                notes.append("weights per GPU (GiB): " + ", ".join(
                    f"cuda:{g} {gib(sum(p.numel() * p.element_size() for p in model.parameters() if p.device.index == g))}"
                    for g in range(ngpu)))
        else:
            n_cut = args.cut_layers or (24 if part == "compare" else 8)
            cfg = cut(shape_config(args.shape), min(n_cut, cfg_full.num_hidden_layers))
            model = materialise(cfg, dtype, {"": main_dev})
            n = sum(p.numel() for p in model.parameters())
            runs = {"one device": run_execs(model, tokens, variants, st, ("step", "chunked"))}
            if part == "compare":
                dm, split = half_map(cfg.num_hidden_layers, first, second), "split half / half over two GPUs"
            else:
                dm = half_map(cfg.num_hidden_layers, first, first)
                dm.update({k: offload for k in dm if k == "lm_head" or (k.startswith("model.layers.") and
                                                                         int(k.split(".")[-1]) >= cfg.num_hidden_layers // 2)})
                split = f"second half of the layers and the lm_head offloaded ({offload})"
            model = spread(model, dm, main_dev)
            result["title"] = (f"{args.shape} cut to {cfg.num_hidden_layers} of {cfg_full.num_hidden_layers} layers "
                               f"({n / 1e9:.1f}B parameters, {result['dtype']}, random): {split} vs one device, {gpu}")
            result["params"] = n
            result["placement"] = placement_by_device(model)
            result["layer_check"] = layer_check(model, variants, tokens, st)
            runs["split"] = run_execs(model, tokens, variants, st, ("step", "chunked"))
            result["kl_compare"] = {"split": split, "one": "one device", "max_abs_dkl": {
                ex: float(np.abs(runs["split"][ex]["kl"] - runs["one device"][ex]["kl"]).max())
                for ex in ("step", "chunked")}}
        result["runs"] = _public(runs)
        result["wall_seconds"] = time.perf_counter() - t0
        result["notes"] = notes + [f"wall time of this part: {result['wall_seconds']:.0f} s"]
        with open(os.path.join(args.out, f"kl_multi_gpu_{part}.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, f"kl_multi_gpu_{part}.md"), "w") as f:
            f.write(_md(result))
        print(_md(result), flush=True)
        del model
        if cuda:
            torch.cuda.empty_cache()
    print(f"report: {build_scale_report(args.out)}")


if __name__ == "__main__":
    main()
