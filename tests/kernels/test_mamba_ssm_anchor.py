"""The Mamba-2 benchmark anchor's loader and argument mapping (kernels/mamba_ssm_anchor.py).

mamba_ssm itself is not a test dependency: a stand-in source tree holds a ``selective_state_update`` written from
mamba_ssm's documented semantics (``state <- state * exp(dt A) + (dt x) B^T``, ``out = state C + D x``), and its
package ``__init__`` raises, as the real one does without its CUDA extensions.
"""

import textwrap

import pytest
import torch

from replayssm_quant.kernels.bench import ANCHOR_REL_TOL
from replayssm_quant.kernels.inputs import random_decode_inputs
from replayssm_quant.kernels.mamba_ssm_anchor import MODULE, check_anchor, load_selective_state_update

STAND_IN = textwrap.dedent('''
    import torch

    def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):
        assert D is not None and dt_bias is not None        # the real function needs both
        dt = dt.float() + dt_bias.float()
        rep = state.shape[1] // B.shape[1]
        Bh, Ch = B.float().repeat_interleave(rep, 1), C.float().repeat_interleave(rep, 1)
        dA = torch.exp(dt[..., None] * A.float())
        state.mul_(dA).add_((dt * x.float())[..., None] * Bh[:, :, None, :])
        return ((state * Ch[:, :, None, :]).sum(-1) + D.float() * x.float()).to(x.dtype)
''')


@pytest.fixture
def source_tree(tmp_path):
    parts = MODULE.split(".")
    d = tmp_path.joinpath(*parts[:-1])
    d.mkdir(parents=True)
    (tmp_path / "mamba_ssm" / "__init__.py").write_text("raise ImportError('CUDA extensions missing')\n")
    (d / (parts[-1] + ".py")).write_text(STAND_IN)
    yield str(tmp_path)
    import sys
    for name in [m for m in sys.modules if m == "mamba_ssm" or m.startswith("mamba_ssm.")]:
        del sys.modules[name]


def test_mapping_matches_the_oracle(source_tree):
    fn = load_selective_state_update(source_tree)
    x = random_decode_inputs("mamba2", 1, 3, 4, 32, 16, generator=torch.Generator().manual_seed(0))
    assert check_anchor(fn, x["q"][0], x["k"][0], x["v"][0], x["g"][0]) < 1e-6


def test_mapping_error_is_seen(source_tree):
    """A wrong argument mapping (decay of the other sign) is caught by the check."""
    fn = load_selective_state_update(source_tree)

    def wrong(**a):
        return fn(**dict(a, A=-a["A"]))
    x = random_decode_inputs("mamba2", 1, 3, 4, 32, 16, generator=torch.Generator().manual_seed(1))
    assert check_anchor(wrong, x["q"][0], x["k"][0], x["v"][0], x["g"][0]) > ANCHOR_REL_TOL   # the bench's gate


def test_missing_source_names_the_file(tmp_path):
    with pytest.raises(ImportError, match="selective_state_update.py not found"):
        load_selective_state_update(str(tmp_path))
