"""Triton kernels (quantize/dequantize, decode steps) beside their torch references.

* :mod:`.naive`       -- float64 oracle of the plain recurrences (mamba2, gdn, kda)
* :mod:`.reference`   -- torch references of the decode algorithms (conventional, replay, dual)
* :mod:`.decode`      -- the generic Triton decode-step kernel
* :mod:`.storage`     -- a checkpoint stored in one format (torch side)
* :mod:`.state_cache` -- :class:`SSMStateCache`, the per-layer decode state
"""

from .naive import FAMILIES, oracle_sequence, oracle_step  # noqa: F401
from .state_cache import SSMStateCache  # noqa: F401
