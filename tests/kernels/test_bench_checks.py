"""The benchmark's device correctness checks (kernels/bench_checks.py), run on a tiny shape (in the interpreter
without a GPU): every check passes, and the counters are verified after every step."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from replayssm_quant.kernels.bench_checks import correctness  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def test_correctness_checks_pass_on_a_tiny_shape():
    rows = correctness("gdn", dict(num_heads=2, head_k=16, head_v=8), 3, DEV, rows=3)
    assert len(rows) == 8
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    oracle_rows = [r for r in rows if "counters_ok" in r]
    assert len(oracle_rows) == 5 and all(r["counters_ok"] for r in oracle_rows)


def test_correctness_checks_with_shared_keys():
    """Where the shape's value heads share keys (num_key_heads < num_heads) the checks run the caches as the
    benchmark times them, one ring key per key head, against the oracle fed the repeated keys."""
    shape = dict(num_heads=4, num_key_heads=2, head_k=16, head_v=8)
    for shared, key_heads in ((True, 2), (False, 4)):
        rows = correctness("gdn", shape, 3, DEV, rows=2, shared_keys=shared)
        assert len(rows) == 8 and all(r["key_heads"] == key_heads and r["ring_dtype"] == "float32" for r in rows)
        assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]


@pytest.mark.parametrize("family", ["gdn", "mamba2"])
def test_correctness_checks_with_a_bf16_ring(family):
    """``ring_dtype=bfloat16`` (bench ``--ring-dtype``): the checks run bf16 rings on inputs drawn in bf16, which the
    rings keep exactly, so replay fp32 stays within 1e-5 of the float64 oracle."""
    rows = correctness(family, dict(num_heads=2, num_key_heads=1, head_k=16, head_v=8), 3, DEV, rows=2,
                       ring_dtype=torch.bfloat16)
    assert len(rows) == 8 and all(r["ring_dtype"] == "bfloat16" for r in rows)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
