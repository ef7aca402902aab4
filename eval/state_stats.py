"""How well each storage format represents a model's real SSM states.

Explains KL results: the separate-checkpoint scheme (Algorithm 3) keeps read
error out of the recurrence, but the recurrence checkpoint itself is still
rounded at every flush, so a recurrence format that represents the states
*worse* than the read format (e.g. unscaled fp8 E4M3 on small-magnitude states,
against NVFP4 with its per-16 block scales) can make ``nvfp4/fp8+sr`` worse than
shared ``nvfp4+sr``.

:func:`state_format_table` prefills held-out documents through the model's own
fp32 path, takes every SSM layer's state ``[D, HV, V, K]`` and reports, per
format, the relative Frobenius error of one round-to-nearest-even cast, and the
fraction of elements that fall below the format's smallest subnormal (flushed
to zero).
"""

from __future__ import annotations

import torch

from replayssm_quant.quant import fake_quantize
from replayssm_quant.quant.formats import FORMATS

#: formats compared (fp32 is exact)
FORMATS_COMPARED = ("bf16", "fp16", "fp8", "e5m2", "nvfp4")


@torch.no_grad()
def prefill_states(model, docs: torch.Tensor) -> dict[int, torch.Tensor]:
    """fp32 SSM states after prefilling ``docs`` (int64 ``[D, P]``): ``{layer_idx: float32 [D, HV, V, K]}``."""
    from .decode import DecodeSession

    with DecodeSession(model, ["fp32"], backend="torch") as s:
        s.prefill(docs)
        slots = torch.arange(docs.shape[0], device=docs.device)
        return {idx: s.caches(idx)[0].state(slots).float().cpu() for idx, _, _ in s.layers}


def state_format_table(states: dict[int, torch.Tensor]):
    """pandas DataFrame, one row per (layer, format): magnitudes, cast error, flushed fraction."""
    import pandas as pd

    rows = []
    for idx, S in states.items():
        a = S.abs().flatten()
        nz = a[a > 0]
        base = {"layer": idx, "elements": a.numel(),
                "median |S|": float(nz.median()) if nz.numel() else 0.0,
                "max |S|": float(a.max())}
        for name in FORMATS_COMPARED:
            f = FORMATS[name]
            q = fake_quantize(S, name)
            err = float((q - S).norm() / S.norm().clamp_min(1e-30))
            below = float((a < f.min_subnormal / 2).float().mean()) if f.block_size is None else float("nan")
            rows.append({**base, "format": name, "rel. cast error": err, "frac below min subnormal": below})
    return pd.DataFrame(rows)


def summary(table):
    """Mean over layers of the cast error per format (DataFrame indexed by format)."""
    return table.groupby("format", sort=False)[["rel. cast error", "frac below min subnormal"]].mean()
