"""Device helpers of kernels/tiles.py on their own, against the numpy reference (kernels/reference.py).

Runs in the Triton CPU interpreter (TRITON_INTERPRET=1) when there is no GPU.
"""

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from replayssm_quant.kernels import reference  # noqa: E402
from replayssm_quant.kernels.tiles import _read_scales  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _read_scales_kernel(xq_ptr, xk_ptr, g_ptr, sq_ptr, sk_ptr, BK: tl.constexpr, DELTA: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BK)
    xq = tl.load(xq_ptr + row * BK + offs)
    xk = tl.load(xk_ptr + row * BK + offs)
    sq, sk = _read_scales(xq, xk, tl.load(g_ptr + row), DELTA)
    tl.store(sq_ptr + row, sq)
    tl.store(sk_ptr + row, sk)


@pytest.mark.parametrize("delta", [True, False])
def test_read_scales_each_input_its_own_exponent(delta):
    """``_read_scales`` gives gamma q and gamma k each the exponent of its own max (one joint reduction), as
    ``reference._read_scale`` does for each alone: rows whose q and k lie decades apart (1e-40 .. 1e37, subnormal
    maxima, an inf, zero rows), with the decay's max in the bound too. Without the delta rule both are
    q's. A swapped or shared maximum changes the exponents. (No NaN: tl.max's NaN handling is the backend's, and
    a NaN input makes the products NaN whatever the exponent.)"""
    rng = np.random.default_rng(7)
    R, BK = 29, 64
    dec_q = rng.integers(-40, 38, R)
    dec_k = rng.integers(-40, 38, R)
    dec_k[:8] = dec_q[:8] + np.array([-30, 30, -60, 60, -5, 5, -75, 75])   # q and k far apart
    xq = (rng.standard_normal((R, BK)) * 10.0 ** dec_q[:, None]).astype(np.float32)
    xk = (rng.standard_normal((R, BK)) * 10.0 ** np.clip(dec_k, -44, 37)[:, None]).astype(np.float32)
    xk[9, 17], xq[10, 3], xk[11] = np.inf, -np.inf, 0.0
    gmax = rng.choice(np.float32([1.0, 0.5, 1e-3, 3e-20, 2.0 ** -126]), R).astype(np.float32)
    sq = torch.full((R,), -999, dtype=torch.int32, device=DEV)    # poisoned
    sk = torch.full((R,), -999, dtype=torch.int32, device=DEV)
    _read_scales_kernel[(R,)](xq_ptr=torch.from_numpy(xq).to(DEV), xk_ptr=torch.from_numpy(xk).to(DEV),
                              g_ptr=torch.from_numpy(gmax).to(DEV), sq_ptr=sq, sk_ptr=sk, BK=BK, DELTA=delta)
    want_q = reference._read_scale(xq, gmax)
    own_k = reference._read_scale(xk, gmax)
    assert (want_q != own_k).sum() >= 8      # the case the joint reduction must keep apart
    want_k = own_k if delta else want_q
    np.testing.assert_array_equal(sq.cpu().numpy(), want_q)
    np.testing.assert_array_equal(sk.cpu().numpy(), want_k)
