"""Where the parts of a model run, also when it is spread over devices (accelerate's ``device_map``).

A model loaded with ``device_map`` (``--device-map auto``, a dict) carries accelerate hooks that move each
block's inputs to the block's *execution device*. That is the device of its parameters, except for blocks
accelerate offloads (``"cpu"`` entries of a map that also names a GPU, ``"disk"`` entries): their parameters
sit on the ``meta`` device between forwards and run on the main execution device. So the device a module
computes on is its (or an enclosing block's) hook's ``execution_device`` when there is one, its parameters'
device otherwise.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch


def resolve_device(device: str | None) -> str:
    """The device to run on: ``device`` checked against this torch build and the visible GPUs, or for None (or
    "") cuda when a GPU is visible, else cpu. ValueError saying what is wrong and what to use instead; the
    caller prefixes the argument's name (``--device``, ``device=``)."""
    if device is None or str(device).strip() == "":
        return "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device).strip()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError("not a torch device; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ValueError(f"this torch ({torch.__version__}) is built without CUDA; install a CUDA build of torch "
                             "or use cpu")
        n = torch.cuda.device_count()
        if n == 0:
            raise ValueError("no CUDA GPU is visible; use cpu")
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"only {n} CUDA GPU(s) visible (cuda:0..cuda:{n - 1})")
    elif dev.type != "cpu":
        raise ValueError(f"runs on cpu or cuda, not {dev.type}; use cpu, cuda or cuda:N")
    return device


def _hook_device(module) -> torch.device | None:
    """The ``execution_device`` of ``module``'s accelerate hook (a SequentialHook's first that has one)."""
    hook = getattr(module, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):
        dev = getattr(h, "execution_device", None)
        if dev is not None:
            return torch.device(dev if not isinstance(dev, int) else f"cuda:{dev}")
    return None


def _param_device(module) -> torch.device | None:
    for p in module.parameters():
        return p.device
    return None


def execution_device(model: torch.nn.Module, module: torch.nn.Module) -> torch.device:
    """The device ``module`` (a submodule of ``model``) computes on: the nearest accelerate hook's execution
    device of it or an enclosing module, else its parameters' device (``cpu`` for a module without any)."""
    names = {id(m): n for n, m in model.named_modules()}
    name = names.get(id(module))
    if name is not None:
        mods = dict(model.named_modules())
        parts = name.split(".") if name else []
        for k in range(len(parts), -1, -1):          # the module itself, then its enclosing modules
            dev = _hook_device(mods[".".join(parts[:k])])
            if dev is not None:
                return dev
    dev = _param_device(module)
    return dev if dev is not None and dev.type != "meta" else torch.device("cpu")


def input_device(model: torch.nn.Module) -> torch.device:
    """Where the token ids go: the execution device of the input embeddings."""
    return execution_device(model, model.get_input_embeddings())


def device_context(device: torch.device):
    """``torch.cuda.device(device)`` for a CUDA device (so Triton launches and CUDA graphs go to that GPU, not to
    the current one), a no-op context otherwise."""
    device = torch.device(device)
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()


def block_placement(model: torch.nn.Module) -> dict[str, str]:
    """``{module name: device}`` as accelerate placed the model (``hf_device_map``; values as given there,
    e.g. ``0``, ``"cpu"``, ``"disk"``), or ``{"": device of the parameters}`` for a model on one device."""
    dm = getattr(model, "hf_device_map", None)
    if dm:
        return {k: str(v) for k, v in dm.items()}
    return {"": str(_param_device(model) or "cpu")}
