"""Make ``lm_eval --model replayssm`` work after ``pip install`` (no wrapper, no extra import).

lm-evaluation-harness 0.4.13 fills its model registry only with its own built-in table
(``lm_eval.models.MODEL_MAPPING``) and never reads the ``lm_eval.models`` entry point the
package declares. This module closes the gap without costing anything at interpreter
start-up: :func:`install` puts a finder at the front of :data:`sys.meta_path` that does
nothing until ``lm_eval.api.registry`` is imported; right after that module has executed it
registers the lazy placeholder ``"replayssm" -> "replayssm_quant.eval.lm_eval_plugin:ReplaySSMLM"``
(torch, transformers and the plugin load only when lm-eval asks for the model).

Start-up: the wheel ships ``replayssm_quant_lm_eval.pth`` in the site-packages root; Python's
``site`` runs its one ``import`` line at every start, which loads this file by path (under the
private name ``_replayssm_quant_lm_eval_autoregister``, without importing the
``replayssm_quant`` package, so a source checkout on ``sys.path`` is never shadowed by the
installed copy) and calls :func:`install`. Editable installs do not get the ``.pth``: use
``replayssm-lm-eval`` there, or import ``replayssm_quant.eval.lm_eval_plugin`` (or call
:func:`install`) before lm-eval looks the model up.

The same hook makes lm-eval's ``TaskManager`` scan the packaged task folder
(``replayssm_quant/eval/tasks``: ``replayssm_copy``, ``replayssm_upper``, tag ``replayssm_synth``;
``replayssm_count``, ``replayssm_recall``, tag ``replayssm_long``)
as its first include path when ``lm_eval.tasks.manager`` is imported, so ``--tasks
replayssm_copy`` needs no ``--include_path`` (lm-eval 0.4.13 has no other way to find tasks
outside its own folder). The plugin module calls :func:`install` too, so ``replayssm-lm-eval``
and Python programs that import it find the tasks in editable installs as well.

Rules this module keeps:

* at start-up it imports only ``os`` and ``sys`` (both loaded before ``site`` runs; the rest
  only once lm-eval is being imported);
* nothing in it may break the interpreter: every failure is swallowed (a
  :class:`RuntimeWarning` at most, when the registration itself fails);
* ``REPLAYSSM_NO_LM_EVAL_AUTOREGISTER=1`` in the environment turns it off;
* lm-eval's ``get_model`` imports its built-in table only while the registry is empty, so
  the hook imports ``lm_eval.models`` (a dict, no model code) before adding ``replayssm``:
  ``--model hf`` and the other built-ins keep working.
"""

import os
import sys

MODEL_NAME = "replayssm"
PLUGIN_MODULE = "replayssm_quant.eval.lm_eval_plugin"
TARGET = f"{PLUGIN_MODULE}:ReplaySSMLM"
#: the module whose import triggers the registration
TRIGGER = "lm_eval.api.registry"
#: the module whose import triggers the task registration (lm-eval's TaskManager)
TASKS_TRIGGER = "lm_eval.tasks.manager"
#: the package holding the packaged task YAMLs (in its tasks/ folder)
TASKS_PACKAGE = "replayssm_quant.eval"
#: set (non-empty) to turn the hook off
DISABLE_ENV = "REPLAYSSM_NO_LM_EVAL_AUTOREGISTER"
#: name of the .pth file in the site-packages root (its source is at the repository root)
PTH_NAME = "replayssm_quant_lm_eval.pth"

_MARK = "_replayssm_lm_eval_hook"  # attribute that identifies our finder (the module may be loaded twice)


def _warn(what: str, exc: BaseException) -> None:
    try:
        import warnings

        warnings.warn(f"replayssm-quant: {what} ({exc!r}); `lm_eval --model replayssm` may not find the "
                      "model: use `replayssm-lm-eval` instead", RuntimeWarning, stacklevel=2)
    except Exception:  # pragma: no cover - never let a warning break an import
        pass


def register(registry_module=None) -> bool:
    """Register the lazy ``replayssm`` placeholder in ``registry_module.model_registry``
    (default: the already-imported ``lm_eval.api.registry``). True when it registered now;
    False when already registered, not applicable, or on any error (never raises)."""
    try:
        if registry_module is None:
            registry_module = sys.modules.get(TRIGGER)
            if registry_module is None:
                return False
        # get_model() loads lm-eval's built-in table only while the registry is empty: load it
        # first, or adding ours would hide hf, vllm, dummy, ... (cheap: a dict, no model code)
        try:
            import lm_eval.models  # noqa: F401
        except Exception as exc:  # pragma: no cover - lm-eval layout changed
            _warn("could not import lm_eval.models", exc)
        reg = registry_module.model_registry
        if MODEL_NAME in reg:
            return False
        main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        if getattr(main_spec, "name", None) == PLUGIN_MODULE:
            # `python -m replayssm_quant.eval.lm_eval_plugin`: the plugin runs as __main__ and
            # registers its own class (__main__.ReplaySSMLM); a placeholder would collide with it
            return False
        reg.register(MODEL_NAME, target=TARGET)
        return True
    except Exception as exc:
        _warn("could not register the 'replayssm' lm-eval model", exc)
        return False


def tasks_dir():
    """The packaged task folder (``replayssm_quant/eval/tasks`` of the copy that imports), or None."""
    import importlib.util

    spec = importlib.util.find_spec(TASKS_PACKAGE)
    for d in (spec and spec.submodule_search_locations) or ():
        f = os.path.join(d, "tasks")
        if os.path.isdir(f):
            return os.path.abspath(f)
    return None


def _with_tasks_path(init, folder: str):
    """``TaskManager.__init__`` that scans ``folder`` too: first of the include paths, so a user's
    ``--include_path`` still overrides a packaged task; not twice when the user names it."""
    import functools
    import inspect

    sig = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            bound = sig.bind(self, *args, **kwargs)
            given = bound.arguments.get("include_path")
            paths = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
            if not any(os.path.abspath(str(p)) == folder for p in paths):
                bound.arguments["include_path"] = [folder] + paths
            args, kwargs = bound.args[1:], bound.kwargs
        except Exception:  # an lm-eval whose signature we do not know: leave the call alone
            pass
        init(self, *args, **kwargs)

    setattr(__init__, _MARK, folder)
    return __init__


def register_tasks(manager_module=None) -> bool:
    """Make lm-eval's ``TaskManager`` (in ``manager_module``, default the imported
    ``lm_eval.tasks.manager``) find the packaged tasks (``replayssm_copy``, ...) by name, as if
    their folder were given with ``--include_path``. lm-eval 0.4.13 has no entry point or
    setting for external task folders; its only way is an include path. True when it patched
    now; False when already patched, not applicable, or on any error (never raises)."""
    try:
        if manager_module is None:
            manager_module = sys.modules.get(TASKS_TRIGGER)
            if manager_module is None:
                return False
        cls = manager_module.TaskManager
        if getattr(cls.__init__, _MARK, False):
            return False
        folder = tasks_dir()
        if folder is None:
            return False
        cls.__init__ = _with_tasks_path(cls.__init__, folder)
        return True
    except Exception as exc:
        _warn("could not add the packaged tasks to lm-eval's TaskManager", exc)
        return False


#: what to do right after each trigger module has executed
_ON_IMPORT = {TRIGGER: lambda m: register(m), TASKS_TRIGGER: lambda m: register_tasks(m)}


class _Loader:
    """Wraps the real loader of ``lm_eval.api.registry``: runs it, then :func:`register`."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # get_code, get_source, get_resource_reader, ...
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:  # the module sees its real loader, as if we were not there
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        except Exception:  # pragma: no cover
            pass
        self._loader.exec_module(module)  # lm-eval's own errors propagate unchanged
        _ON_IMPORT[module.__name__](module)


class _Finder:
    """``sys.meta_path`` finder that answers only for :data:`TRIGGER` and :data:`TASKS_TRIGGER`:
    it asks the finders after it for the real spec and wraps the spec's loader in :class:`_Loader`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _ON_IMPORT:
            return None
        try:
            spec = None
            for finder in list(sys.meta_path):
                if getattr(finder, _MARK, False):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader)
            return spec
        except Exception:  # let the normal import machinery find it (and report its own errors)
            return None


setattr(_Finder, _MARK, True)


def installed() -> bool:
    """Whether a hook finder is in :data:`sys.meta_path`."""
    return any(getattr(f, _MARK, False) for f in sys.meta_path)


def install(ignore_env: bool = False) -> bool:
    """Put the hook into :data:`sys.meta_path` (idempotent; registers right away what is already
    imported: the model when ``lm_eval.api.registry`` is, the tasks when ``lm_eval.tasks.manager``
    is). False when turned off by ``REPLAYSSM_NO_LM_EVAL_AUTOREGISTER`` (unless ``ignore_env``:
    the plugin module, imported on purpose) or on error; never raises."""
    try:
        if not ignore_env and os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
            return False
        if not installed():
            sys.meta_path.insert(0, _Finder())
        for name, on_import in _ON_IMPORT.items():
            if name in sys.modules:
                on_import(sys.modules[name])
        return True
    except Exception:  # pragma: no cover
        return False


def uninstall() -> None:
    """Take the hook out of :data:`sys.meta_path` (tests)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, _MARK, False)]
