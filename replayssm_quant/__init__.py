"""replayssm-quant: low-precision recurrent state for SSM decoding.

Subpackages (each lives in its own top-level folder of the repository):

* :mod:`replayssm_quant.quant`   -- number formats, rounding, the state-spec grammar
* :mod:`replayssm_quant.kernels` -- Triton decode/quantize kernels and their torch references
* :mod:`replayssm_quant.eval`    -- model adapters, data, KL and downstream evaluation, reports
"""

__version__ = "0.1.0"


def _source_tree_path() -> None:
    """Running from a source checkout without an install (``python -m replayssm_quant`` in the
    repository root, as the GPU scripts do): the subpackages live in the sibling top-level folders
    quant/, kernels/, eval/, so add the repository root to this package's search path."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(root, "pyproject.toml")) and all(
        os.path.isfile(os.path.join(root, d, "__init__.py")) for d in ("quant", "kernels", "eval")
    ):
        if root not in __path__:
            __path__.append(root)


_source_tree_path()
