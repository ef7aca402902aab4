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


def pytest_configure(config):
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
    import pytest

    skip = pytest.mark.skip(reason="needs the Gutenberg books: set REPLAYSSM_GUTENBERG_DIR to their folder")
    for item in items:
        if "books" in item.keywords:
            item.add_marker(skip)
