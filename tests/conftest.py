"""Suite-wide setup: without a GPU, Triton kernels run in the interpreter.

TRITON_INTERPRET is read when a kernel module is first imported, so it must be
set before any test module imports replayssm_quant.kernels.

The interpreter's ``tl.dot`` is ``numpy.matmul``, and the bit-exact tests compare it with numpy matmuls of
other shapes (the torch references, other value blocks). OpenBLAS's FMA kernels (its Haswell, Zen and SkylakeX
cores) round a product differently with the matrix's row or column count, so those tests would depend on the
machine; its pre-FMA Sandybridge core adds the products in key order one rounding at a time, whatever the shape.
OPENBLAS_CORETYPE is read when numpy loads OpenBLAS, and ``import torch`` imports numpy: it is set first, over
any value in the environment (some machines set ``Haswell``), for this test process only.
"""

import os
import sys

import pytest

if "numpy" not in sys.modules:
    os.environ["OPENBLAS_CORETYPE"] = "Sandybridge"

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


def _matmul_is_shape_independent() -> bool:
    """Whether a numpy fp32 matmul's rows and columns come out the same in a product of other size."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((32, 128), dtype=np.float32)
    full = a @ b
    return bool(np.array_equal(a[:16] @ b, full[:16]) and np.array_equal(a @ b[:, :16], full[:, :16]))


def pytest_configure(config):
    if not _cuda and not _matmul_is_shape_independent():
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            "numpy's fp32 matmul rounds differently with the matrix size on this machine (OPENBLAS_CORETYPE "
            f"{os.environ.get('OPENBLAS_CORETYPE')!r}; numpy imported before tests/conftest.py?): the interpreter's "
            "bit-exact kernel tests may fail by one ulp"), stacklevel=2)
    config.addinivalue_line(
        "markers", "books: needs the Gutenberg books (../shared/data/gutenberg beside a developer's checkout, or "
        "$REPLAYSSM_GUTENBERG_DIR); skipped in a user's clone that has none, never skipped in CI")


def _books_available() -> bool:
    from replayssm_quant.eval import gutenberg

    try:
        gutenberg.heldout_books()
        gutenberg.train_books()
    except FileNotFoundError:
        return False
    return True


def pytest_collection_modifyitems(config, items):
    # CI has the books beside the clone: there a missing folder must fail the tests, not skip them
    if os.environ.get("CI") or _books_available():
        return

    skip = pytest.mark.skip(reason="needs the Gutenberg books: set REPLAYSSM_GUTENBERG_DIR to their folder")
    for item in items:
        if "books" in item.keywords:
            item.add_marker(skip)
