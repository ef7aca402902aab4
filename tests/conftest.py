"""Suite-wide setup: without a GPU, Triton kernels run in the interpreter.

TRITON_INTERPRET is read when a kernel module is first imported, so it must be
set before any test module imports replayssm_quant.kernels.

The interpreter's ``tl.dot`` is ``numpy.matmul``, and the bit-exact tests compare it with numpy matmuls of
other shapes (the torch references, other value blocks). OpenBLAS's FMA kernels (its Haswell, Zen and SkylakeX
cores) round a product differently with the matrix's row or column count, so those tests would depend on the
machine; its pre-FMA Sandybridge core adds the products in key order one rounding at a time, whatever the shape.
OPENBLAS_CORETYPE is read when numpy loads OpenBLAS, and ``import torch`` imports numpy: it is set first, over
any value in the environment (some machines set ``Haswell``), for this test process only.

Under pytest-xdist each worker gets its share of the cores for torch, OpenMP and OpenBLAS threads (and passes it
to the scripts it starts), unless the environment says otherwise: two workers on two cores each running two
threads oversubscribe them and slow torch's CPU model tests down.
"""

import os
import sys

import pytest

if "numpy" not in sys.modules:
    os.environ["OPENBLAS_CORETYPE"] = "Sandybridge"
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, (os.cpu_count() or 1) // _XDIST_WORKERS)
_SHARE_CORES = _XDIST_WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ
if _SHARE_CORES:
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_THREADS))

try:
    import torch

    _cuda = torch.cuda.is_available()
    if _SHARE_CORES:
        torch.set_num_threads(_THREADS)
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


def _skip_repatching_in_device_calls() -> None:
    """Triton 3.6's interpreter re-patches the language modules on every call of a ``@triton.jit`` function inside
    a kernel (``InterpretedFunction.__call__`` -> ``_patch_lang``, also for ``tl.sum`` and ``tl.zeros``): an
    ``inspect.getmembers`` walk over them each time, a large share of an interpreted decode step. Within one launch
    (``GridExecutor.__call__``) a repeat for modules already patched sets nothing new: builtins already replaced
    are no longer builtins, and the rest are the same stateless functions. So each launch remembers the modules
    patched so far (its own, then those of the helpers it called) and skips a helper's patch that would cover no
    other. What the kernels compute does not change; only the interpreter's bookkeeping is spared. Other Triton
    versions keep the stock behaviour."""
    import triton

    if not triton.__version__.startswith("3.6.") or os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter

    original_patch, launch = interpreter._patch_lang, interpreter.GridExecutor.__call__
    lang_modules = (interpreter.tl, interpreter.tl.core)
    patched: list[set] = []          # per running launch (launches can nest): the language modules patched so far
    langs_cache: dict = {}

    def langs_of(fn) -> frozenset:
        if fn not in langs_cache:
            langs_cache[fn] = frozenset(id(m) for m in fn.__globals__.values() if any(m is lm for lm in lang_modules))
        return langs_cache[fn]

    def patch_lang(fn):
        if patched and langs_of(fn) <= patched[-1]:
            return interpreter._LangPatchScope()   # nothing to set, nothing to restore
        if patched:
            patched[-1] |= langs_of(fn)
        return original_patch(fn)

    def launch_call(self, *args, **kwargs):
        patched.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = launch_call

if not _cuda:
    _skip_repatching_in_device_calls()
