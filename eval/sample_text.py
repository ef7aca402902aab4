"""The default KL documents: text sampled from the fp32 embedded model (``--data sampled``).

The KL evaluation's default data must ship with the package (no network, no books beside the
clone) and may not contain book text. So the project makes its own: documents sampled with a
fixed seed from an embedded demo model in fp32 (ancestral sampling at temperature 1 over the 256
byte tokens; the special tokens are masked out), stored as ``eval/kl_data/sampled.jsonl`` (one
``{"text": ...}`` per line) with ``eval/kl_data/sampled.meta.json`` saying how it was made (model,
its content hash, seed, prompt, lengths, commit).

At run time the file is plain text: it does not depend on the weights of whichever model is
embedded then (any tokenizer reads it). Regenerate it with::

    python -m replayssm_quant.eval.sample_text --model gdn-demo --docs 16 --length 4096 --seed 0

(fp32 on the CPU, the torch state backend; a few minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

KL_DATA_DIR = Path(__file__).resolve().parent / "kl_data"
SAMPLED_FILE = KL_DATA_DIR / "sampled.jsonl"
SAMPLED_META = KL_DATA_DIR / "sampled.meta.json"
PROMPT = "\n\n"


@torch.no_grad()
def sample_documents(model, num_docs: int, length: int, seed: int = 0, prompt: bytes = PROMPT.encode(),
                     progress: bool = False) -> list[bytes]:
    """``num_docs`` byte strings of ``length`` bytes each, sampled from ``model``'s fp32 decode path.

    Args:
        model: a byte-level ``*ForCausalLM`` (ids 0..255 are bytes) supported by
            :class:`~replayssm_quant.eval.decode.DecodeSession`, fp32, eval mode, on the CPU.
        prompt: bytes every document is conditioned on (not part of the output).

    Sampling: softmax of the fp32 logits over ids 0..255 (special tokens masked), one
    ``torch.multinomial`` draw per document and step from a ``torch.Generator`` seeded ``seed``.
    """
    from tqdm.auto import tqdm

    from .decode import DecodeSession

    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([list(prompt)] * num_docs, dtype=torch.int64)
    out = torch.empty(num_docs, length, dtype=torch.int64)
    with DecodeSession(model, "fp32", backend="torch", cuda_graphs=False) as s:
        logits = s.prefill(ids)
        for t in tqdm(range(length), desc="sampling", unit="byte", disable=not progress):
            probs = torch.softmax(logits[:, :256].double(), -1)
            nxt = torch.multinomial(probs, 1, generator=g)[:, 0]
            out[:, t] = nxt
            if t + 1 < length:
                logits = s.step(nxt)
    return [bytes(row.tolist()) for row in out]


def main(argv: list[str] | None = None) -> int:
    import subprocess

    from .adapters.loading import load_model, model_fingerprint

    ap = argparse.ArgumentParser(description="sample the default KL documents from an embedded model (fp32, CPU)")
    ap.add_argument("--model", default="gdn-demo")
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--length", type=int, default=4096, help="bytes per document")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(SAMPLED_FILE))
    a = ap.parse_args(argv)
    lm = load_model(a.model, device="cpu")
    docs = sample_documents(lm.model, a.docs, a.length, a.seed, progress=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d.decode("utf-8", errors="replace")}) + "\n")
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    meta = {"model": a.model, "model_hash": model_fingerprint(lm.model), "docs": a.docs, "length_bytes": a.length,
            "seed": a.seed, "prompt": PROMPT, "sampling": "temperature 1 over byte ids 0..255 (specials masked), "
            "fp32 replay reference decode, torch backend, CPU", "torch": torch.__version__, "commit": commit,
            "decode": "bytes.decode('utf-8', errors='replace')"}
    out.with_name(out.name.replace(".jsonl", ".meta.json")).write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out} ({a.docs} documents of {a.length} bytes)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
