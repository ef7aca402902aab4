"""The public conventional Mamba-2 decode kernel as a benchmark anchor: ``selective_state_update`` of mamba_ssm
(``mamba_ssm/ops/triton/selective_state_update.py``, the Triton kernel that vLLM's Mamba-2 decode derives from).

mamba_ssm's package ``__init__`` imports its CUDA extensions, which a GPU image without a build of them cannot
load; the kernel file itself needs only torch, triton and einops. :func:`load_selective_state_update` therefore
imports that one file (and its ``softplus`` helper) from a source tree (an unpacked sdist) under stub parent
packages, or from an installed mamba_ssm when that imports.

The benchmark's Mamba-2 inputs (:func:`.inputs.random_decode_inputs`: ``k = B``, ``q = C``, ``v = dt * x``, log decay
``g = dt * A`` per head) map onto the kernel's arguments exactly: ``A = -1`` and ``dt = -g`` per head (stride-0
views over the head dimension, as vLLM passes them, which selects the kernel's tied-head-dim path),
``x = v / dt``, ``B = k``, ``C = q`` with one group per head, ``D = 0``, no gate. The state update is then
``S <- exp(g) S + v k^T`` and the output ``S q``: :func:`check_anchor` measures it against the float64 oracle.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import torch

#: environment variable naming a mamba_ssm source tree (the folder that holds ``mamba_ssm/``)
SRC_ENV = "REPLAYSSM_MAMBA_SSM_SRC"
MODULE = "mamba_ssm.ops.triton.selective_state_update"


def load_selective_state_update(src: str | None = None):
    """mamba_ssm's ``selective_state_update`` function.

    Args:
        src: a folder holding ``mamba_ssm/ops/triton/selective_state_update.py`` (default: ``$REPLAYSSM_MAMBA_SSM_SRC``);
            ``None`` and no variable: the installed mamba_ssm.

    Raises:
        ImportError: with what is missing (the file under ``src``, or an importable mamba_ssm).
    """
    src = src or os.environ.get(SRC_ENV)
    if src:
        path = os.path.join(src, *MODULE.split(".")) + ".py"
        if not os.path.isfile(path):
            raise ImportError(f"{path} not found: {SRC_ENV} / --mamba-ssm-src must name the folder that holds "
                              "mamba_ssm/ (an unpacked mamba_ssm sdist)")
        parts = MODULE.split(".")
        for i in range(1, len(parts)):        # stub parents: their __init__ files (CUDA extensions) never run
            name = ".".join(parts[:i])
            if name not in sys.modules:
                pkg = types.ModuleType(name)
                pkg.__path__ = [os.path.join(src, *parts[:i])]
                sys.modules[name] = pkg
    return importlib.import_module(MODULE).selective_state_update


def anchor_args(state, q, k, v, g):
    """mamba_ssm arguments for one benchmark step (module doc).

    Args:
        state: float32 ``[B, HV, V, K]``; q, k: ``[B, HV, K]``; v: ``[B, HV, V]`` (activation dtype);
            g: float32 log decays ``[B, HV]`` (< 0).

    Returns:
        dict of keyword arguments of ``selective_state_update`` (the state updated in place by the call).
    """
    HV, V = state.shape[1], state.shape[2]
    dt = (-g).to(v.dtype)                                          # [B, HV]
    x = (v.float() / dt.float()[..., None]).to(v.dtype)            # [B, HV, V]
    A = torch.full((HV, 1, 1), -1.0, device=state.device).expand(HV, V, state.shape[3])
    zeros = torch.zeros(HV, 1, device=state.device).expand(HV, V)   # (the function needs D and dt_bias tensors)
    return dict(state=state, x=x, dt=dt[..., None].expand(-1, -1, V), A=A, B=k, C=q, D=zeros, dt_bias=zeros,
                dt_softplus=False)


def check_anchor(fn, q, k, v, g, generator=None) -> float:
    """Max relative error of one anchor step's output against :func:`.naive.oracle_step` (float64) on the
    same inputs (``[B, HV, *]`` as :func:`anchor_args`), from a random fp32 state."""
    from .naive import oracle_step

    B, HV, K = k.shape
    V = v.shape[-1]
    S = torch.randn(B, HV, V, K, device=k.device, generator=generator) * 0.1
    args = anchor_args(S.clone(), q, k, v, g)
    # the oracle gets the inputs the anchor sees after its own casts (dt and x in the activation dtype)
    dt = args["dt"][..., 0].double()
    o_ref, _ = oracle_step("mamba2", S, q, k, args["x"].double() * dt[..., None], -dt)
    o = fn(**args)
    return float((o.double() - o_ref).abs().max() / o_ref.abs().max())
