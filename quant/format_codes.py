"""Format codes: one small int per storage format, shared by the torch side and the Triton kernels.

The model is torchao's ``mx_formats/constants.py``: plain ints, no enum, so a code can be passed as a
``tl.constexpr`` launch argument and compared inside a kernel as ``FMT == fc.NVFP4`` (a module attribute:
Triton 3.6 reads module attributes of a jitted function's globals as constants, but refuses bare non-constexpr
globals). ``FORMAT_CODE`` maps a format's name (:data:`.formats.FORMATS`) to its code.

Bit layouts (written here once; the storage table of docs/CONTRACTS.md and :mod:`.reference` follow it):

==========  ====  ===========================================================================================
format      code  stored bits per element
==========  ====  ===========================================================================================
fp32        0     the fp32 bit pattern (float32 tensor)
bf16        1     sign | 8 exponent | 7 mantissa (int16 tensor)
fp16        2     sign | 5 exponent | 10 mantissa (int16 tensor)
e4m3        3     OCP E4M3FN, the raw cast: sign | 4 exponent | 3 mantissa, S.1111.111 = NaN, no inf (uint8
                  tensor; what ``fp8`` meant before the row scale)
e5m2        4     OCP E5M2: sign | 5 exponent | 2 mantissa (uint8 tensor)
nvfp4       5     E2M1 codes, element 2i in the low nibble and 2i+1 in the high one (uint8 ``[.., K//2]``),
                  one E4M3 block scale per 16 elements (uint8 ``[.., K//16]``), fp32 ``s_enc`` per (slot, head)
e2m1        6     a bare E2M1 element: sign | 2 exponent | 1 mantissa in the low 4 bits (no tensor format of
                  its own: the element of nvfp4, for the element kernels)
fp8         7     row-scaled E4M3FN: the e4m3 bits of x / d (uint8 ``[.., V, K]``), one fp32 decode scale d per
                  row (float32 ``[.., V]``); arithmetic: :mod:`.reference` ("Row-scaled fp8 and int8")
int8        8     row-scaled integer: two's complement codes -127..127, -128 = NaN (int8 ``[.., V, K]``), one
                  fp32 decode scale per row (float32 ``[.., V]``)
==========  ====  ===========================================================================================
"""

FP32 = 0
BF16 = 1
FP16 = 2
E4M3 = 3
E5M2 = 4
NVFP4 = 5
E2M1 = 6
FP8 = 7
INT8 = 8

#: format name -> code (the ``FMT`` constexpr of the kernels)
FORMAT_CODE = {"fp32": FP32, "bf16": BF16, "fp16": FP16, "e4m3": E4M3, "e5m2": E5M2, "nvfp4": NVFP4, "e2m1": E2M1,
               "fp8": FP8, "int8": INT8}

