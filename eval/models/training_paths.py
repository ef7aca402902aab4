"""Install the fast chunked GDN / SSD functions into the stock modeling modules, for training only.

transformers' Qwen3.5 GDN layer calls the module-level ``torch_chunk_gated_delta_rule`` and
Nemotron-H's and Mamba2's Mamba-2 mixers call their module-level ``mamba2_chunk_scan``; inside
:func:`fast_training_paths` those names point at :mod:`.fast_gdn` / :mod:`.fast_ssd` (same
arguments, same results up to fp32 rounding; see tests/eval/test_training.py). On exit the
originals come back, so saved and reloaded models always run the stock code.
"""

from __future__ import annotations

import contextlib


def _targets():
    from transformers.models.mamba2 import modeling_mamba2 as mm
    from transformers.models.nemotron_h import modeling_nemotron_h as mn
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    from .fast_gdn import chunk_gated_delta_rule
    from .fast_ssd import mamba2_chunk_scan

    return [(mq, "torch_chunk_gated_delta_rule", chunk_gated_delta_rule),
            (mn, "mamba2_chunk_scan", mamba2_chunk_scan), (mm, "mamba2_chunk_scan", mamba2_chunk_scan)]


@contextlib.contextmanager
def fast_training_paths(enabled: bool = True):
    """Context manager: the fast chunked paths replace the stock torch fallbacks while inside."""
    if not enabled:
        yield
        return
    saved = []
    try:
        for mod, name, fn in _targets():
            saved.append((mod, name, getattr(mod, name)))
            setattr(mod, name, fn)
        yield
    finally:
        for mod, name, orig in saved:
            setattr(mod, name, orig)
