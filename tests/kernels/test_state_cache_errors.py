"""Bad inputs to SSMStateCache raise ValueError with a message saying what is wrong."""

import pytest
import torch

from replayssm_quant.kernels import SSMStateCache
from replayssm_quant.kernels.launch import check_device_formats
from replayssm_quant.quant.spec import parse_state_spec


def _c(**kw):
    args = dict(family="gdn", spec="e4m3/fp16", num_slots=3, num_heads=2, head_k=32, head_v=8, window=4,
                backend="torch")
    args.update(kw)
    return SSMStateCache(**args)


def _x(B=2, HV=2, K=32, V=8):
    return (torch.randn(B, HV, K), torch.randn(B, HV, K), torch.randn(B, HV, V), -torch.rand(B, HV),
            torch.rand(B, HV))


@pytest.mark.parametrize("kw,msg", [
    (dict(family="mamba3"), "unknown recurrence family"),
    (dict(spec="fp7"), "unknown format"),
    (dict(spec="fp32/e4m3"), "wider than"),
    (dict(mode="eager"), "unknown decode mode"),
    (dict(mode="conventional"), "conventional decoding takes a shared spec"),
    (dict(backend="cuda"), "unknown backend"),
    (dict(spec="nvfp4/fp16", head_k=40), "multiple of 16"),
    (dict(spec="nvfp4", head_k=24), "multiple of 16"),
    (dict(window=0), "window must be a positive int"),
    (dict(num_heads=2.0), "num_heads must be a positive int"),
    (dict(seed=-1), "seed"),
    (dict(ring_dtype=torch.float64), "ring_dtype torch.float64: allowed torch.float32, torch.bfloat16"),
])
def test_bad_construction(kw, msg):
    with pytest.raises(ValueError, match=msg):
        _c(**kw)


def test_bad_step_inputs():
    c = _c()
    c.load_state(torch.tensor([0, 1]), torch.randn(2, 2, 8, 32))
    q, k, v, g, beta = _x()
    idx = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"q has shape \(2, 2, 16\), expected \(2, 2, 32\)"):
        c.step(idx, q[..., :16], k, v, g, beta)
    with pytest.raises(ValueError, match="v has shape"):
        c.step(idx, q, k, v[:1], g, beta)
    with pytest.raises(ValueError, match="g has shape"):
        c.step(idx, q, k, v, torch.zeros(2, 2, 32), beta)
    with pytest.raises(ValueError, match="k has dtype torch.float64"):
        c.step(idx, q, k.double(), v, g, beta)
    with pytest.raises(ValueError, match=r"g holds positive log decays \(max 0.5\): the log decay g must be <= 0"):
        c.step(idx, q, k, v, torch.where(g == g.max(), 0.5, g), beta)
    c.step(idx, q, k, v, g.abs(), beta, validate=False)          # unchecked: no host sync (CUDA graphs)
    with pytest.raises(ValueError, match="needs beta"):
        c.step(idx, q, k, v, g, None)
    with pytest.raises(ValueError, match="slot indices must be a 1-D int32/int64"):
        c.step(idx.float(), q, k, v, g, beta)
    with pytest.raises(ValueError, match="slot index out of range"):
        c.step(torch.tensor([0, 3]), q, k, v, g, beta)
    with pytest.raises(ValueError, match="duplicate slot"):
        c.step(torch.tensor([1, 1]), q, k, v, g, beta)
    with pytest.raises(ValueError, match="out must be"):
        c.step(idx, q, k, v, g, beta, out=torch.empty(2, 2, 7))
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        c.step(idx, q.tolist(), k, v, g, beta)
    m = SSMStateCache("mamba2", "fp32", 2, 2, 32, 8, backend="torch")
    with pytest.raises(ValueError, match="takes no beta"):
        m.step(idx, q, k, v, g, beta)
    kda = SSMStateCache("kda", "fp32", 2, 2, 32, 8, backend="torch")
    with pytest.raises(ValueError, match=r"g has shape \(2, 2\), expected \(2, 2, 32\)"):
        kda.step(idx, q, k, v, g, beta)


def test_bad_load_state():
    c = _c()
    with pytest.raises(ValueError, match="state has shape"):
        c.load_state(torch.tensor([0]), torch.randn(1, 2, 32, 8))
    with pytest.raises(ValueError, match="float32"):
        c.load_state(torch.tensor([0]), torch.randn(1, 2, 8, 32).double())
    with pytest.raises(ValueError, match="slot index out of range"):
        c.load_state(torch.tensor([-1]), torch.randn(1, 2, 8, 32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to build a device mismatch")
def test_device_mismatch():
    c = _c(device="cuda")
    q, k, v, g, beta = _x()
    with pytest.raises(ValueError, match="is on cpu"):
        c.step(torch.tensor([0, 1], device="cuda"), q, k, v, g, beta)


def test_device_mismatch_cpu_cache_meta_input():
    c = _c()
    q, k, v, g, beta = _x()
    with pytest.raises(ValueError, match="is on meta"):
        c.step(torch.tensor([0, 1]), q.to("meta"), k, v, g, beta)


@pytest.mark.parametrize("cc,spec,bad", [((8, 0), "nvfp4/fp16", "nvfp4"), ((8, 6), "fp8+sr", "fp8"),
                                         ((8, 0), "e4m3/fp32", "e4m3"), ((8, 0), "fp16", None),
                                         ((8, 0), "int8+sr", None), ((8, 9), "nvfp4/fp8+sr", None),
                                         ((9, 0), "fp8", None)])
def test_gpu_older_than_sm89_refuses_the_e4m3_formats(monkeypatch, cc, spec, bad):
    """On a CUDA GPU below compute capability 8.9 a Triton cache of fp8 / e4m3 / nvfp4 is refused with a message
    naming the formats, the GPU and the way out, before anything is allocated; other formats and newer GPUs pass
    the check (the capability is faked: the check runs on a CPU machine too)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    sp = parse_state_spec(spec)
    if bad is None:
        check_device_formats(torch.device("cuda"), (sp.recur.name, sp.read.name), "test")
        return
    msg = rf"{bad}.* compute capability 8.9 or later .* sm_{cc[0]}{cc[1]}\. Use backend='torch'"
    with pytest.raises(ValueError, match=msg):
        check_device_formats(torch.device("cuda"), (sp.recur.name, sp.read.name), "test")
    with pytest.raises(ValueError, match=r"SSMStateCache\(spec=.*" + msg):
        _c(spec=spec, backend="triton", device="cuda")
    check_device_formats(torch.device("cpu"), (bad,), "test")   # the interpreter takes every format


def test_triton_on_cpu_without_the_interpreter_is_a_clear_error(monkeypatch):
    """The check reads the environment when it runs: without TRITON_INTERPRET=1 a CPU device is refused by name
    (the cache, and the quantize kernels behind ``quantize(..., backend="triton")``); other devices likewise."""
    from replayssm_quant.quant import quantize
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    msg = r"the Triton kernels on a CPU device need TRITON_INTERPRET=1 .*backend='torch'"
    with pytest.raises(ValueError, match=r"SSMStateCache\(spec='e4m3/fp16'\): " + msg):
        _c(backend="triton")
    for fmt in ("fp16", "fp8", "nvfp4"):
        with pytest.raises(ValueError, match=msg):
            quantize(torch.randn(2, 16), fmt, backend="triton")
    with pytest.raises(ValueError, match=r"test: the Triton kernels run on CUDA GPUs or, through the interpreter"):
        check_device_formats(torch.device("meta"), (), "test")


def test_sizes_take_numpy_ints_and_conventional_ignores_the_window():
    np = pytest.importorskip("numpy")
    c = _c(num_slots=np.int64(3), head_v=np.int32(8))
    assert type(c.num_slots) is int and type(c.head_v) is int
    assert _c(spec="fp16", mode="conventional", window=0).window == 1
    with pytest.raises(ValueError, match="head_k must be a positive int, got True"):
        _c(head_k=True)


def test_nan_log_decay_is_refused():
    c = _c()
    q, k, v, g, beta = _x()
    g[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"g holds NaN: the log decay g must be <= 0"):
        c.step([0, 1], q, k, v, g, beta)


def test_out_on_another_device_is_refused_before_anything_changes():
    c = _c()
    c.load_state([0, 1], torch.randn(2, 2, 8, 32))
    before = c.ring_count.clone()
    with pytest.raises(ValueError, match=r"out must be a contiguous float32 tensor of shape \(2, 2, 8\) on cpu"):
        c.step([0, 1], *_x(), out=torch.empty(2, 2, 8, device="meta"))
    assert torch.equal(c.ring_count, before)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_autograd_inputs_are_detached(backend):
    """Model tensors that require grad (outside no_grad) decode as their values; the cache keeps no graph."""
    if backend == "triton":
        pytest.importorskip("triton")
    c, ref = _c(spec="fp32", backend=backend), _c(spec="fp32", backend=backend)
    S = torch.randn(2, 2, 8, 32)
    c.load_state([0, 1], S.clone().requires_grad_())
    ref.load_state([0, 1], S)
    assert not any(t.requires_grad for t in c.stored_tensors().values())
    xs = _x()
    out = c.step([0, 1], *[x.clone().requires_grad_() for x in xs])
    assert not out.requires_grad and torch.equal(out, ref.step([0, 1], *xs))
    assert not c.state([0, 1]).requires_grad
