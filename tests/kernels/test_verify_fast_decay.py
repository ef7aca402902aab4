"""Verify after committed ring entries with fast decays (cumulative log decay below -88 inside a window, as the
embedded gdn-demo model has): the outputs stay finite and equal the step-by-step outputs. The ring-to-token decay
of a padded token row (cumulative log decay 0) used to overflow exp to inf, and 0 * inf = NaN reached every output
through the window solve."""

import pytest
import torch

from replayssm_quant.kernels.state_cache import SSMStateCache

DEV = "cuda" if torch.cuda.is_available() else "cpu"   # the triton backend needs the GPU or the interpreter


@pytest.mark.parametrize("family", ["gdn", "mamba2", "kda"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_fast_decays_after_committed_entries(family, backend):
    g0 = torch.Generator().manual_seed(7)
    HV, K, V, L, T = 2, 16, 16, 8, 3
    kw = dict(family=family, spec="fp32", num_slots=1, num_heads=HV, head_k=K, head_v=V, window=L, backend=backend,
              device=DEV)
    spec, plain = SSMStateCache(max_draft=T, **kw), SSMStateCache(**kw)
    state = torch.randn(1, HV, V, K, generator=g0).to(DEV)
    spec.load_state([0], state)
    plain.load_state([0], state)
    slots = torch.tensor([0], device=DEV)
    n = 2 * T

    def rnd(*shape):
        return torch.randn(*shape, generator=g0).to(DEV)

    q = torch.nn.functional.normalize(rnd(1, n, HV, K), dim=-1) / K ** 0.5
    k = torch.nn.functional.normalize(rnd(1, n, HV, K), dim=-1)
    v = rnd(1, n, HV, V)
    g = (-30.0 - torch.rand(1, n, HV, *((K,) if family == "kda" else ()), generator=g0)).to(DEV)  # sum < -88 in 3
    beta = None if family == "mamba2" else torch.rand(1, n, HV, generator=g0).to(DEV)
    ref = torch.stack([plain.step(slots, q[:, t], k[:, t], v[:, t], g[:, t], None if beta is None else beta[:, t])
                       for t in range(n)], 1)
    outs = []
    for w in range(0, n, T):                                  # verify T, commit all T: the ring holds entries
        sl = slice(w, w + T)
        outs.append(spec.verify(slots, q[:, sl], k[:, sl], v[:, sl], g[:, sl], None if beta is None else beta[:, sl]))
        spec.commit(slots, torch.tensor([T], device=DEV))
    out = torch.cat(outs, 1)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
