#!/usr/bin/env python3
"""KL of the 8-bit recurrence formats on a random-weight model whose SSM heads keep memory (issue 24).

    source scripts/gpu/setup.sh && python3 scripts/gpu/rowscaled_kl.py --out "$OUT/rowscaled"
    python scripts/gpu/rowscaled_kl.py --small --out /tmp/rk        # CPU smoke test (tiny model, few tokens)

1. Builds a random Qwen3.5-like hybrid (``--size medium``: hidden 512, 4 layers: GDN, GDN, attention, GDN;
   8 value heads / 4 key heads of K = V = 128, the Qwen3.5-4B head shape; ``--small``: 64 hidden, K = 16,
   V = 8) from its config, seeded, fp32, and makes its GDN heads keep memory: ``in_proj_a`` scaled by
   ``--a-scale`` (the decay barely depends on the input), ``dt_bias`` = softplus^-1(0.01) and
   ``A_log = log(1 - decay) - log(0.01)`` so that a = exp(-exp(A_log) softplus(a_t + dt_bias)) is about
   ``--decay`` (default 0.9993) per step; the lm_head is multiplied by ``--head-scale`` (random logits are
   otherwise near uniform and any KL is tiny). The measured per-step decays (median, 5th percentile, over the
   heads and the prefilled tokens) go into the report.
2. Saves it with the byte tokenizer under OUT/model and writes seeded random text (printable ASCII; the
   weights are random, so real text would say nothing more) to OUT/text.txt.
3. Runs ``replayssm-quant eval`` with the fp32 reference and ``--specs`` (default nvfp4+sr, nvfp4/e4m3+sr,
   nvfp4/fp8+sr, nvfp4/int8+sr, nvfp4/fp16) side by side: prefill ``--prefill``, then ``--tokens``
   teacher-forced tokens for ``--docs`` documents (replay, window 16). Results and eval's own report in
   OUT/kl/ (rerun the same command to resume a cut run).
4. Writes OUT/report.md: the mean KL per log2 position bucket side by side, and for each separate spec the
   ratio shared nvfp4+sr / spec in the longest bucket (> 1: the separate spec beats the shared one), whatever
   it is. Copy OUT/report.md (and OUT/kl/*.csv, *.png) to reports/kl/rowscaled/ to commit it.

fp8 / int8 here are the row-scaled formats (one fp32 scale per state row); e4m3 is the raw E4M3 cast that
``fp8`` meant before (DESIGN.md sec. 4).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECS = ["nvfp4+sr", "nvfp4/e4m3+sr", "nvfp4/fp8+sr", "nvfp4/int8+sr", "nvfp4/fp16"]
SHARED = "nvfp4+sr"

SIZES = {  # Qwen3_5TextConfig arguments
    "medium": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=128, linear_num_value_heads=8, linear_num_key_heads=4,
                   linear_key_head_dim=128, linear_value_head_dim=128,
                   layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"]),
    "small": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=32, linear_num_value_heads=4, linear_num_key_heads=2,
                  linear_key_head_dim=16, linear_value_head_dim=8,
                  layer_types=["linear_attention", "full_attention", "linear_attention"]),
}


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder (created; rerun to resume)")
    p.add_argument("--small", action="store_true", help="CPU smoke test: --size small, 48 tokens, 2 docs")
    p.add_argument("--size", choices=list(SIZES), default=None, help="model size (default medium; --small: small)")
    p.add_argument("--specs", default=",".join(SPECS), help=f"comma list (default {','.join(SPECS)})")
    p.add_argument("--decay", type=float, default=0.9993, help="target per-step GDN decay (default 0.9993)")
    p.add_argument("--a-scale", type=float, default=0.1, help="factor on in_proj_a (default 0.1)")
    p.add_argument("--head-scale", type=float, default=30.0, help="factor on the lm_head (default 30)")
    p.add_argument("--prefill", type=int, default=None, help="prefill tokens (default 256; --small 16)")
    p.add_argument("--tokens", type=int, default=None, help="teacher-forced tokens (default 1024; --small 48)")
    p.add_argument("--docs", type=int, default=None, help="documents (default 16; --small 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda if available)")
    p.add_argument("--backend", default=None, choices=["triton", "torch"],
                   help="state-cache backend passed to eval (default: triton on CUDA, torch on CPU)")
    a = p.parse_args(argv)
    small = a.small
    a.size = a.size or ("small" if small else "medium")
    a.prefill = a.prefill or (16 if small else 256)
    a.tokens = a.tokens or (48 if small else 1024)
    a.docs = a.docs or (2 if small else 16)
    if not 0 < a.decay < 1:
        p.error(f"--decay must be in (0, 1), got {a.decay}")
    a.specs = [s.strip() for s in a.specs.split(",") if s.strip()]
    return a


def _import_package():
    sys.path.insert(0, str(REPO))      # this checkout's code
    import replayssm_quant

    if str(REPO) not in replayssm_quant.__path__:
        replayssm_quant.__path__.append(str(REPO))


def build_model(size: str, decay: float, a_scale: float, head_scale: float, seed: int):
    """The random hybrid with long-memory GDN heads (see the module docstring)."""
    import torch
    import transformers as T

    from replayssm_quant.eval.adapters.families import GDN, family_of
    from replayssm_quant.eval.models.tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer()
    cfg = T.Qwen3_5TextConfig(vocab_size=264, **SIZES[size])
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    dt = 0.01
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(head_scale)
        for m in model.modules():
            if family_of(m) is GDN:
                m.in_proj_a.weight.mul_(a_scale)
                m.dt_bias.fill_(math.log(math.expm1(dt)))
                m.A_log.fill_(math.log(-math.log(decay) / dt))
    return model, tok


def measured_decays(model, ids) -> "torch.Tensor":
    """Per-step decays exp(-exp(A_log) softplus(a_t + dt_bias)) of every GDN head over the tokens ``ids``."""
    import torch
    import torch.nn.functional as F

    from replayssm_quant.eval.adapters.families import GDN, family_of

    got, hooks = [], []
    for m in model.modules():
        if family_of(m) is GDN:
            def hook(mod, inp, out, m=m):
                got.append(torch.exp(-torch.exp(m.A_log.float()) * F.softplus(out.float() + m.dt_bias.float())))
            hooks.append(m.in_proj_a.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([g.flatten() for g in got])


def write_text(path: Path, chars: int, seed: int) -> None:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    out, n = [], 0
    while n < chars:
        w = rng.choice(words)
        out.append(w)
        n += len(w) + 1
    path.write_text(" ".join(out) + "\n")


def report(out: Path, a, decays, seconds: float) -> str:
    import torch

    from replayssm_quant.eval.report import load_tables
    from replayssm_quant.quant.spec import parse_state_spec

    t = load_tables(out / "kl")
    b = t["buckets"]
    cols = [c for c in b.columns if c != "docs"]
    longest = cols[-1]
    K = SIZES[a.size]["linear_key_head_dim"]
    lines = [
        "# 8-bit recurrence formats on a long-memory random model (issue 24)",
        "",
        f"- command: `{' '.join(['python3', *sys.argv])}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}; "
        f"wall time {seconds:.0f} s",
        "- device: " + (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
        + f"; torch {torch.__version__}, python {platform.python_version()}",
        f"- model: random Qwen3.5-like hybrid, size `{a.size}` ({SIZES[a.size]['num_hidden_layers']} layers, "
        f"GDN heads K = {K}, V = {SIZES[a.size]['linear_value_head_dim']}), seed {a.seed}, lm_head x {a.head_scale}; "
        f"GDN per-step decay: median {decays.median():.5f}, 5th percentile {decays.quantile(0.05):.5f}, "
        f"min {decays.min():.5f} (measured on one prefilled document)",
        f"- {t['config']['docs']} documents of seeded random text, prefill {a.prefill} tokens (fp32), then "
        f"{a.tokens} teacher-forced tokens, replay window {t['config']['window']}, SR seed 0",
        "- formats: `fp8` / `int8` row-scaled (one fp32 decode scale per state row, amax/448, amax/127; "
        f"{parse_state_spec('fp8').recur.bits_at(K):.4g} bits per element at K = {K}); `e4m3` the raw E4M3 cast "
        "(what `fp8` meant before the row scale)",
        "",
        "## Mean KL(fp32 || spec) per position bucket (nats)",
        "",
        "| spec | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for v in b.index:
        lines.append(f"| {v} | " + " | ".join(f"{b.loc[v, c]:.4g}" for c in cols) + " |")
    lines += ["", f"## Longest bucket ({longest}): shared {SHARED} against each separate spec", ""]
    if SHARED in b.index:
        ref = b.loc[SHARED, longest]
        for v in b.index:
            if v in ("fp32", SHARED):
                continue
            r = ref / b.loc[v, longest] if b.loc[v, longest] > 0 else float("inf")
            verdict = "beats" if r > 1 else "does NOT beat"
            lines.append(f"- `{v}`: mean KL {b.loc[v, longest]:.4g} vs {ref:.4g} for `{SHARED}`: "
                         f"{SHARED} / {v} = **{r:.3g}x** ({v} {verdict} the shared spec)")
    lines += ["", "Eval's own report (per-position statistics, plots): `kl/report.md`.", ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    return text


def main(argv=None) -> int:
    import time

    a = parse(argv)
    _import_package()
    if a.small:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    from replayssm_quant.eval.decode import parse_variant

    for s in a.specs:                                      # a bad spec fails before any work
        try:
            parse_variant(s)
        except ValueError as e:
            print(f"rowscaled_kl: error: {e}", file=sys.stderr)
            return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    model, tok = build_model(a.size, a.decay, a.a_scale, a.head_scale, a.seed)
    (out / "model").mkdir(exist_ok=True)
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    length = a.prefill + a.tokens + 1
    write_text(out / "text.txt", 2 * length * a.docs + 10000, a.seed)
    ids = tok((out / "text.txt").read_text()[: a.prefill + 1], add_special_tokens=False, return_tensors="pt")["input_ids"]
    decays = measured_decays(model, ids)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    argv = ["eval", "--model", str(out / "model"), "--data", str(out / "text.txt"), "--prefill", str(a.prefill),
            "--tokens", str(a.tokens), "--docs", str(a.docs), "--batch-docs", str(a.docs), "--seed", "0",
            "--out", str(out / "kl"), "--device", device, "--no-progress"]
    if a.backend:
        argv += ["--backend", a.backend]
    for s in a.specs:
        argv += ["--state", s]
    from replayssm_quant.cli import main as cli_main

    rc = cli_main(argv)                                    # eval in this process (resumable: rerun to continue)
    if rc:
        print(f"rowscaled_kl: eval failed (exit {rc}); rerun the same command to resume", file=sys.stderr)
        return rc
    print(report(out, a, decays, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
