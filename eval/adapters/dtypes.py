"""The ``--dtype`` of the model weights (CLI ``--dtype``, lm-eval ``dtype=``).

``auto`` keeps the checkpoint's dtype (bf16 for released models; a model built from a config, as the tiny
ones, is float32). Only the weights change: the SSM state of every variant, the fp32 reference's included,
is kept and updated in float32 (or the variant's storage formats) whatever the weights (DESIGN.md sec. 6).
"""

from __future__ import annotations

#: accepted ``--dtype`` values
WEIGHT_DTYPES = ("auto", "bfloat16", "float16", "float32")


def parse_weight_dtype(text):
    """``"auto"`` or the ``torch.dtype`` of a ``--dtype`` value; ``ValueError`` (one line) listing the valid ones."""
    import torch

    if isinstance(text, torch.dtype):
        text = str(text).removeprefix("torch.")
    name = str(text).strip().lower()
    if name not in WEIGHT_DTYPES:
        raise ValueError(f"unknown dtype {text!r}; valid: {', '.join(WEIGHT_DTYPES)} (auto = the checkpoint's)")
    return "auto" if name == "auto" else getattr(torch, name)


def weights_dtype(model) -> str:
    """The dtype name of ``model``'s floating-point parameters (``"bfloat16"``; several joined by ``+``)."""
    names = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()})
    return "+".join(names) or "none"
