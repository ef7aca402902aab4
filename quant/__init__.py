"""Number formats, rounding and the state-spec grammar (DESIGN.md sec. 4, 5).

Public API::

    from replayssm_quant.quant import FORMATS, quantize, dequantize, fake_quantize
    q = quantize(x, "nvfp4", rounding="sr", seed=0)   # QuantizedTensor
    y = dequantize(q)                                   # float32, shape of x
"""

from .spec import StateSpec, parse_state_spec, VALID_FORMS  # noqa: F401
from .formats import FORMATS, FormatInfo, get_format  # noqa: F401
from .api import QuantizedTensor, quantize, dequantize, fake_quantize  # noqa: F401
from .reference import encode_bits, decode_bits, round_to_format, nvfp4_quantize, nvfp4_dequantize  # noqa: F401
from .reference import rowscaled_quantize, rowscaled_dequantize  # noqa: F401
from .philox import philox_uint32, philox4x32, grouped_rbits, flat_rbits  # noqa: F401
