"""`lm_eval --model replayssm` without a wrapper: the start-up hook (replayssm_quant_lm_eval.pth).

lm-eval 0.4.13 ignores the ``lm_eval.models`` entry point; the wheel ships a ``.pth`` whose
``import`` line installs :mod:`replayssm_quant._lm_eval_autoregister`, which registers the
model when ``lm_eval.api.registry`` is imported. Each check runs in a fresh interpreter that
processes the repository's ``.pth`` through ``site.addsitedir`` (so it works whether or not
the package under test was installed with the ``.pth``: editable installs are not).
"""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from replayssm_quant import _lm_eval_autoregister as hook  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PTH_SRC = REPO / hook.PTH_NAME


@pytest.fixture(scope="module")
def pth_dir(tmp_path_factory):
    """A site dir holding only the .pth (the package itself comes from the current install)."""
    assert PTH_SRC.is_file(), f"{PTH_SRC} missing"
    d = tmp_path_factory.mktemp("site_with_pth")
    (d / hook.PTH_NAME).write_text(PTH_SRC.read_text())
    return d


def _env(**extra):
    """The child's environment: offline, the hook on, and this checkout first on sys.path (the .pth
    then loads the hook of the code under test, not of whatever copy is installed)."""
    env = {k: v for k, v in os.environ.items() if k != hook.DISABLE_ENV}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]), **extra)
    return env


def _python(code: str, cwd, env=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env=env or _env(), timeout=timeout)


_PROBE = r"""
import json, site, sys
started_with_hook = "_replayssm_quant_lm_eval_autoregister" in sys.modules
site.addsitedir(sys.argv[1])
state = {"started_with_hook": started_with_hook,
         "hook_loaded": "_replayssm_quant_lm_eval_autoregister" in sys.modules,
         "heavy_at_start": sorted(m for m in ("torch", "lm_eval", "transformers", "replayssm_quant")
                                  if m in sys.modules)}
from lm_eval.api.registry import get_model, model_registry
state["registered"] = "replayssm" in model_registry
state["builtins"] = all(n in model_registry for n in ("hf", "dummy", "vllm"))
state["plugin_imported_early"] = "replayssm_quant.eval.lm_eval_plugin" in sys.modules
state["torch_imported_early"] = "torch" in sys.modules
state["hook_file"] = getattr(sys.modules.get("_replayssm_quant_lm_eval_autoregister"), "__file__", None)
try:
    cls = get_model("replayssm")
    state["cls"] = cls.__module__ + ":" + cls.__name__
except Exception as e:
    state["cls"] = None
    state["error"] = str(e)[:300]
try:
    state["dummy"] = get_model("dummy").__name__
except Exception as e:
    state["dummy"] = "error: " + str(e)[:300]
print("PROBE " + json.dumps(state))
"""


def _probe(pth_dir, tmp_path, env=None) -> dict:
    proc = _python(_PROBE.replace("sys.argv[1]", repr(str(pth_dir))), tmp_path, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")][-1]
    return json.loads(line[len("PROBE "):])


def test_pth_registers_replayssm_lazily(pth_dir, tmp_path):
    """After the .pth: nothing heavy at start-up, the model is a lazy placeholder once lm-eval's
    registry is imported, lm-eval's built-in models still resolve."""
    st = _probe(pth_dir, tmp_path)
    assert st["hook_loaded"]
    assert st["heavy_at_start"] == []  # not even replayssm_quant: a source checkout is never shadowed
    assert st["registered"] and st["builtins"]
    assert not st["plugin_imported_early"] and not st["torch_imported_early"]
    assert st["cls"] == hook.TARGET
    assert st["dummy"] == "DummyLM"
    assert Path(st["hook_file"]) == Path(hook.__file__)  # the hook under test


def test_opt_out_env_leaves_lm_eval_untouched(pth_dir, tmp_path):
    """REPLAYSSM_NO_LM_EVAL_AUTOREGISTER=1: no hook (also not from an installed .pth), so lm-eval 0.4.13
    on its own does not know the model: the negative control of the test above."""
    st = _probe(pth_dir, tmp_path, _env(**{hook.DISABLE_ENV: "1"}))
    assert not st["started_with_hook"] and not st["hook_loaded"]
    assert not st["registered"] and st["cls"] is None
    assert "no model for this name found" in st["error"]
    assert st["dummy"] == "DummyLM"


def test_plugin_run_as_main_does_not_collide(pth_dir, tmp_path):
    """`python -m replayssm_quant.eval.lm_eval_plugin` (the wrapper) with the hook active: the plugin
    registers its own __main__ class, the hook stays out of its way (no 'already registered' error)."""
    code = (f"import runpy, site, sys; site.addsitedir({str(pth_dir)!r}); sys.argv = ['x', '--help']\n"
            "try:\n    runpy.run_module('replayssm_quant.eval.lm_eval_plugin', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
            "from lm_eval.api.registry import get_model\n"
            "print('CLS', get_model('replayssm').__module__, get_model('dummy').__name__)")
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CLS __main__ DummyLM" in proc.stdout


def test_hook_never_raises():
    """Failures inside the hook are swallowed (a RuntimeWarning at most); other imports pass through."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert hook.register(object()) is False  # no model_registry attribute
    assert any(issubclass(x.category, RuntimeWarning) and "replayssm-lm-eval" in str(x.message) for x in w)
    f = hook._Finder()
    assert f.find_spec("json") is None and f.find_spec("lm_eval.api") is None


def test_installed_package_ships_the_pth():
    """A wheel / `pip install .` install (CI) puts the .pth in site-packages, identical to the source;
    an editable install (the dev venv) does not (documented)."""
    dist = importlib.metadata.distribution("replayssm-quant")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    editable = bool(direct.get("dir_info", {}).get("editable"))
    files = {str(f): f for f in dist.files or []}
    if editable:
        assert hook.PTH_NAME not in files
    else:
        assert hook.PTH_NAME in files, sorted(files)[:20]
        assert Path(files[hook.PTH_NAME].locate()).read_text() == PTH_SRC.read_text()


class _FakeManagerModule:
    """Stands for ``lm_eval.tasks.manager``: a TaskManager with lm-eval 0.4.13's signature."""

    class TaskManager:
        def __init__(self, verbosity=None, include_path=None, include_defaults=True, metadata=None):
            self.include_path, self.include_defaults, self.metadata = include_path, include_defaults, metadata


def test_register_tasks_adds_the_packaged_folder_first_once():
    """The packaged task folder becomes the first include path (a user's --include_path still
    overrides it), is not added twice when the user names it, and patching is idempotent."""
    from replayssm_quant.eval.downstream import TASKS_DIR

    folder = hook.tasks_dir()
    assert folder == str(TASKS_DIR) and (TASKS_DIR / "replayssm_copy.yaml").is_file()
    mod = type("M", (), {"TaskManager": type("TaskManager", (_FakeManagerModule.TaskManager,), {})})
    assert hook.register_tasks(mod) is True
    assert hook.register_tasks(mod) is False  # already patched
    TM = mod.TaskManager
    assert TM().include_path == [folder]
    assert TM(include_path="/mine").include_path == [folder, "/mine"]
    assert TM(None, ["/a", "/b"], False, {"x": 1}).include_path == [folder, "/a", "/b"]
    assert TM(None, ["/a", "/b"], False, {"x": 1}).include_defaults is False
    assert TM(include_path=[folder + "/"]).include_path == [folder + "/"]  # named by the user: once
    assert TM(include_path=str(TASKS_DIR)).include_path == str(TASKS_DIR)  # left as given
    with pytest.raises(TypeError):  # lm-eval's own argument errors are unchanged
        TM(colour="red")


def test_real_task_manager_finds_packaged_tasks_by_name():
    """With the plugin imported (the test process: editable installs, the replayssm-lm-eval wrapper),
    lm-eval's own TaskManager knows the packaged tasks and tag without an include path (lm-eval's
    own task folder left out of the scan to keep this fast)."""
    import replayssm_quant.eval.lm_eval_plugin  # noqa: F401  (installs the hook)
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_defaults=False)
    assert {"replayssm_copy", "replayssm_upper", "replayssm_synth"} <= set(tm.all_tasks)
    assert {"replayssm_count", "replayssm_recall", "replayssm_long"} <= set(tm.all_tasks)
