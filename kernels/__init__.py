"""Triton kernels (quantize/dequantize, decode steps) beside their torch references.

* :mod:`.naive`       -- float64 oracle of the plain recurrences (mamba2, gdn, kda) and of Algorithms 1 and 3
* :mod:`.reference`   -- torch references of the decode algorithms, in the kernels' operation order
* :mod:`.decode`      -- the decode-step launcher; :mod:`.launch` its plan (:class:`.launch.LaunchKnobs`)
* :mod:`.fused`, :mod:`.nonflush`, :mod:`.flush`, :mod:`.nvfp4_items` -- the step's Triton kernels, on the
  device functions of :mod:`.tiles`, :mod:`.ring`, :mod:`.flush_math` and :mod:`.rounding`
* :mod:`.quantize`    -- Triton quantize / dequantize (the ``"triton"`` backend of ``replayssm_quant.quant``)
* :mod:`.storage`     -- a checkpoint stored in one format (torch side)
* :mod:`.state_cache` -- :class:`SSMStateCache`, the per-layer decode state
"""

from replayssm_quant.quant.api import register_backend as _register_backend

# the Triton quantize launchers serve replayssm_quant.quant.quantize(backend="triton" | "auto" on CUDA), imported on
# first use (quant/ never imports kernels/; no Triton needed until then)
_register_backend("triton", __name__ + ".quantize")
from .naive import FAMILIES, oracle_sequence, oracle_step, replay_decode  # noqa: F401
from .state_cache import SSMStateCache  # noqa: F401
