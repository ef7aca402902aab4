"""replayssm-quant: low-precision recurrent state for SSM decoding.

Subpackages (each lives in its own top-level folder of the repository):

* :mod:`replayssm_quant.quant`   -- number formats, rounding, the state-spec grammar
* :mod:`replayssm_quant.kernels` -- Triton decode/quantize kernels and their torch references
* :mod:`replayssm_quant.eval`    -- model adapters, data, KL and downstream evaluation, reports
"""

__version__ = "0.1.0"
