"""Routing a model's decode-step function to a state cache, per layer.

For each modeling module, the decode-step global (e.g.
``modeling_qwen3_5.torch_recurrent_gated_delta_rule``) is replaced once by a
dispatcher. The dispatcher calls the original unless a *route* is active; a
route is made active only while a hooked layer's ``forward`` runs (a forward
pre-hook sets it, a forward hook clears it, also on exceptions). A model with
no attached session therefore behaves exactly as before.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
from typing import Callable

import torch

from .families import Family, RunStep

#: the active route: (family, module globals, run) or None
_ROUTE: contextvars.ContextVar = contextvars.ContextVar("replayssm_route", default=None)


def _install_dispatcher(mod, fam: Family) -> None:
    orig = getattr(mod, fam.fn_name)
    if getattr(orig, "_replayssm_orig", None) is not None:
        return
    sig = inspect.signature(orig)
    ns = vars(mod)

    def dispatcher(*args, **kwargs):
        route = _ROUTE.get()
        if route is None:
            return orig(*args, **kwargs)
        return fam.step(sig, ns, route, args, kwargs)

    dispatcher._replayssm_orig = orig
    dispatcher.__name__ = getattr(orig, "__name__", fam.fn_name)
    dispatcher.__doc__ = orig.__doc__
    setattr(mod, fam.fn_name, dispatcher)


def attach(layer: torch.nn.Module, fam: Family, run: RunStep, active: Callable[[], bool]) -> list:
    """Route ``layer``'s decode-step calls to ``run`` while ``active()`` is true.

    Returns the hook handles; ``handle.remove()`` on each detaches.
    """
    _install_dispatcher(sys.modules[type(layer).__module__], fam)
    tokens: list = []

    def pre(_mod, _args):
        # only the session that is decoding routes; an attached idle session leaves the route alone
        tokens.append(_ROUTE.set(run) if active() else None)

    def post(_mod, _args, _out):
        tok = tokens.pop() if tokens else None
        if tok is not None:
            _ROUTE.reset(tok)

    return [layer.register_forward_pre_hook(pre), layer.register_forward_hook(post, always_call=True)]
