"""How well each storage format represents a model's real SSM states.

Explains KL results: the separate-checkpoint scheme (Algorithm 3) keeps read
error out of the recurrence, but the recurrence checkpoint itself is still
rounded at every flush, so a recurrence format that represents the states
*worse* than the read format (e.g. the raw E4M3 cast ``e4m3`` on small-magnitude
states, against NVFP4 with its per-16 block scales) can make ``nvfp4/e4m3+sr`` worse
than shared ``nvfp4+sr``; the row-scaled ``fp8`` / ``int8`` are the 8-bit formats
serving stacks use.

:func:`prefill_states` prefills the ``--data`` documents through the model's own
fp32 path and takes every SSM layer's state ``[D, HV, V, K]``; :func:`state_format_table` reports, per
format, the relative Frobenius error of one round-to-nearest-even cast, and the
fraction of the nonzero elements that the cast rounds to zero (every format,
scaled or not: below the smallest subnormal of a raw cast, below half the
smallest code step times the scale of a scaled one).
"""

from __future__ import annotations

import torch

from replayssm_quant.quant import fake_quantize

#: formats compared (fp32 is exact)
FORMATS_COMPARED = ("bf16", "fp16", "fp8", "int8", "e4m3", "e5m2", "nvfp4")
#: the per-format statistics of :func:`state_format_table`
STATS = ("rel. cast error", "frac rounded to zero")


@torch.no_grad()
def prefill_states(model, docs: torch.Tensor) -> dict[int, torch.Tensor]:
    """fp32 SSM states after prefilling ``docs`` (int64 ``[D, P]``): ``{layer_idx: float32 [D, HV, V, K]}``."""
    from .decode import DecodeSession

    with DecodeSession(model, ["fp32"], backend="torch") as s:
        s.prefill(docs)
        slots = torch.arange(docs.shape[0], device=docs.device)
        return {idx: s.caches(idx)[0].state(slots).float().cpu() for idx, _, _ in s.layers}


def state_format_table(states: dict[int, torch.Tensor]):
    """pandas DataFrame, one row per (layer, format): magnitudes (``median |S|`` over the nonzero elements,
    ``max |S|``), the relative Frobenius error of one RNE cast and the fraction of the nonzero elements that
    the cast rounds to zero (``S [D, HV, V, K]``: fp8 / int8 scale each row of K, nvfp4 each (doc, head))."""
    import pandas as pd

    rows = []
    for idx, S in states.items():
        a = S.abs().flatten()
        nz = a > 0
        base = {"layer": idx, "elements": a.numel(),
                "median |S|": float(a[nz].median()) if nz.any() else 0.0,
                "max |S|": float(a.max())}
        for name in FORMATS_COMPARED:
            q = fake_quantize(S, name).flatten()
            err = float((q - S.flatten()).norm() / S.norm().clamp_min(1e-30))
            zero = float((q[nz] == 0).float().mean()) if nz.any() else 0.0
            rows.append({**base, "format": name, STATS[0]: err, STATS[1]: zero})
    return pd.DataFrame(rows)


def summary(table):
    """Mean over layers of the statistics per format (DataFrame indexed by format)."""
    return table.groupby("format", sort=False)[list(STATS)].mean()


def markdown(df, **kw) -> str:
    """``df.to_markdown`` with ``|`` in the column names and index escaped (``median |S|`` would split a column)."""
    out = df.rename(columns=lambda c: str(c).replace("|", "\\|"))
    if out.index.name:
        out.index.name = out.index.name.replace("|", "\\|")
    return out.to_markdown(**kw)
