"""The CUDA caching allocator's setting for the toolkit's own long runs (``replayssm-quant eval`` / ``downstream``).

The KV cache of a transformers model grows by one ``torch.cat`` per attention layer and forward, which fragments
the default caching allocator's reserve into several times the memory in use; expandable segments keep the reserve
near it (the readings: reports/kl/scale/README.md, "The memory target"). So the commands ask for them, unless the
user set the allocator themselves.
"""

from __future__ import annotations

import os

#: the setting asked for
EXPANDABLE_SEGMENTS = "expandable_segments:True"
#: the environment variables torch reads it from (``PYTORCH_ALLOC_CONF`` is the newer name)
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def use_expandable_segments() -> str:
    """Set ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` unless one of :data:`ALLOC_CONF_VARS` is set; returns
    the setting in effect (for run.json). Takes effect only if CUDA's caching allocator has not started yet (no CUDA
    tensor made in this process): the commands call it before loading the model."""
    for var in ALLOC_CONF_VARS:
        if os.environ.get(var):
            return os.environ[var]
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = EXPANDABLE_SEGMENTS
    return EXPANDABLE_SEGMENTS
