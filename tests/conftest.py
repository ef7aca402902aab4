"""Suite-wide setup: without a GPU, Triton kernels run in the interpreter.

TRITON_INTERPRET is read when a kernel module is first imported, so it must be
set before any test module imports replayssm_quant.kernels.
"""

import os

try:
    import torch

    _cuda = torch.cuda.is_available()
except Exception:  # pragma: no cover - torch is a hard dependency
    _cuda = False
if not _cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
