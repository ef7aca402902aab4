"""Routing a model's decode-step function to a state cache, per layer.

For each modeling module, the decode-step global (e.g.
``modeling_qwen3_5.torch_recurrent_gated_delta_rule``) and the multi-token global
(``torch_chunk_gated_delta_rule``) are replaced once by dispatchers. A dispatcher
calls the original unless its *route* is active; a route is made active only
while a hooked layer's ``forward`` runs (a forward pre-hook sets it, a forward
hook clears it, also on exceptions). The step route is active while a session
decodes; the chunk route only while a session feeds several tokens per forward
(chunked teacher forcing), never during prefill. A model with no attached
session therefore behaves exactly as before.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
from typing import Callable

import torch

from .families import Family, RunChunk, RunStep

#: the active step route (the ``run`` of the decoding layer) or None
_ROUTE: contextvars.ContextVar = contextvars.ContextVar("replayssm_route", default=None)
#: the active multi-token route (``run_chunk`` of the layer fed several tokens) or None
_CHUNK_ROUTE: contextvars.ContextVar = contextvars.ContextVar("replayssm_chunk_route", default=None)


def _install_dispatcher(mod, fn_name: str, translate, route_var: contextvars.ContextVar) -> None:
    """Replace ``mod.fn_name`` by a dispatcher: ``translate(sig, globals, route, args, kwargs)`` while
    ``route_var`` holds a route, the original otherwise (installed once per module and function)."""
    orig = getattr(mod, fn_name)
    if getattr(orig, "_replayssm_orig", None) is not None:
        return
    sig = inspect.signature(orig)
    ns = vars(mod)

    def dispatcher(*args, **kwargs):
        route = route_var.get()
        if route is None:
            return orig(*args, **kwargs)
        return translate(sig, ns, route, args, kwargs)

    dispatcher._replayssm_orig = orig
    dispatcher.__name__ = getattr(orig, "__name__", fn_name)
    dispatcher.__doc__ = orig.__doc__
    setattr(mod, fn_name, dispatcher)


def attach(layer: torch.nn.Module, fam: Family, run: RunStep, active: Callable[[], bool],
           run_chunk: RunChunk | None = None, chunk_active: Callable[[], bool] = lambda: False) -> list:
    """Route ``layer``'s decode-step calls to ``run`` while ``active()`` is true, and its multi-token calls to
    ``run_chunk`` while ``chunk_active()`` is true.

    Returns the hook handles; ``handle.remove()`` on each detaches.
    """
    mod = sys.modules[type(layer).__module__]
    _install_dispatcher(mod, fam.fn_name, fam.step, _ROUTE)
    _install_dispatcher(mod, fam.chunk_fn_name, fam.chunk, _CHUNK_ROUTE)
    tokens: list = []

    def pre(_mod, _args):
        # only the session that is decoding routes; an attached idle session leaves the routes alone
        tokens.append((_ROUTE.set(run) if active() else None,
                       _CHUNK_ROUTE.set(run_chunk) if run_chunk is not None and chunk_active() else None))

    def post(_mod, _args, _out):
        tok, ctok = tokens.pop() if tokens else (None, None)
        if ctok is not None:
            _CHUNK_ROUTE.reset(ctok)
        if tok is not None:
            _ROUTE.reset(tok)

    return [layer.register_forward_pre_hook(pre), layer.register_forward_hook(post, always_call=True)]
