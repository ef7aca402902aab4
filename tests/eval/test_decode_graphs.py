"""CUDA graphs of the per-layer SSM decode step (DecodeSession(cuda_graphs=True)).

On the GPU the graphed step must give the eager step's logits bit for bit (the same kernels
replayed); on the CPU the option is inert. scripts/gpu/decode_graph_check.py runs the same check on
the embedded models and times both.
"""

import pytest
import torch

from replayssm_quant.eval.adapters import ssm_layers
from replayssm_quant.eval.adapters.tiny import TINY_ARCHS, tiny_model
from replayssm_quant.eval.decode import DecodeSession

VARIANTS = ["fp32", "nvfp4+sr", "nvfp4/fp8+sr", "conventional:fp8+sr"]


def _decode(model, ids, P, graphs, device):
    with DecodeSession(model, VARIANTS, window=4, seed=5, cuda_graphs=graphs) as s:
        out = [s.prefill(ids[:, :P])]
        for t in range(P, ids.shape[1]):
            out.append(s.step(ids[:, t]))
        return torch.stack(out), len(s._graphs)   # graphs recorded (before close drops them)


def test_env_var_turns_graphs_off(monkeypatch):
    model = tiny_model(TINY_ARCHS[0])
    def flag(**kw):
        with DecodeSession(model, "fp32", **kw) as s:
            return s.cuda_graphs
    monkeypatch.setenv("REPLAYSSM_CUDA_GRAPHS", "0")
    assert not flag()
    monkeypatch.delenv("REPLAYSSM_CUDA_GRAPHS")
    assert flag()
    assert not flag(cuda_graphs=False)


def test_cpu_session_records_no_graph():
    model = tiny_model(TINY_ARCHS[0])
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    _, n_graphs = _decode(model, ids, 6, True, "cpu")
    assert n_graphs == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_graphed_step_equals_eager_bit_for_bit(arch):
    model = tiny_model(arch).cuda()
    ids = torch.randint(0, model.config.vocab_size, (3, 8 + 20), generator=torch.Generator().manual_seed(1)).cuda()
    eager, _ = _decode(model, ids, 8, False, "cuda")
    graphed, n_graphs = _decode(model, ids, 8, True, "cuda")
    assert n_graphs == len(ssm_layers(model))   # one graph per SSM layer
    assert torch.equal(eager, graphed)


def _feed(model, ids, P, C, graphs):
    """chunked-all feeds of ``C`` tokens (the last one shorter) after a prefill: logits [rows, N, vocab] and the
    graph kinds recorded per SSM layer."""
    with DecodeSession(model, VARIANTS, window=4, seed=5, cuda_graphs=graphs, exec_mode="chunked-all") as s:
        s.prefill(ids[:, :P])
        out = [s.feed(ids[:, c0:min(c0 + C, ids.shape[1])]) for c0 in range(P, ids.shape[1], C)]
        return torch.cat(out, 1), sorted(kind for _, kind in s._graphs)


def test_cpu_chunked_session_records_no_graph():
    model = tiny_model(TINY_ARCHS[0])
    ids = torch.randint(0, model.config.vocab_size, (2, 6 + 8), generator=torch.Generator().manual_seed(0))
    _, kinds = _feed(model, ids, 6, 4, True)
    assert kinds == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_graphed_chunked_windows_equal_eager_bit_for_bit(arch):
    """Three feeds of two windows each (eager + capture, then two replays), then a shorter feed (new shapes:
    eager + capture again): the logits of every position equal the eager windows' bit for bit."""
    model = tiny_model(arch).cuda()
    ids = torch.randint(0, model.config.vocab_size, (3, 8 + 3 * 8 + 4),
                        generator=torch.Generator().manual_seed(1)).cuda()
    eager, _ = _feed(model, ids, 8, 8, False)
    graphed, kinds = _feed(model, ids, 8, 8, True)
    assert kinds == ["chunk"] * len(ssm_layers(model))   # one chunk graph per SSM layer (the last shape's)
    assert torch.equal(eager, graphed)


@pytest.mark.parametrize("kw, match", [
    (dict(window=2.5), "window must be a positive int, got 2.5"),
    (dict(window="4"), "window must be a positive int, got '4'"),
    (dict(window=0), "window must be a positive int, got 0"),
    (dict(seed=1.5), r"seed must be an int in \[0, 2\*\*63\), got 1.5"),
    (dict(seed="3"), r"seed must be an int in \[0, 2\*\*63\), got '3'"),
])
def test_session_refuses_bad_window_and_seed(kw, match):
    """No silent coercion: a float window or seed is refused, not truncated (the caches refuse them too)."""
    with pytest.raises(ValueError, match=match):
        DecodeSession(tiny_model("mamba2", seed=1), ["fp32"], **kw)
