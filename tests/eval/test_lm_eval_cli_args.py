"""lm-eval's real command line with ``--model replayssm`` (issue 29, issue 30 item 4).

* ``--device`` / ``--batch_size`` beside the same keys in ``--model_args``, in every combination:
  never a "got multiple values" TypeError, model_args win, lm-eval's values apply otherwise;
* no ``--device`` on a machine without a GPU (lm-eval's default is cuda:0): the run falls back to
  cpu with a one-line notice; ``device=cuda`` in model_args there is a one-line error;
* the packaged task ``replayssm_upper`` (first prompt 104 bytes: a fast prefill) is found by name, without ``--include_path``.

All runs go through lm-eval's own ``__main__`` (what the ``lm_eval`` script runs) in one fresh
interpreter that processes the repository's ``.pth`` (as a ``pip install`` does), on a tiny random
model, ``--limit 1``. To keep it fast the child memoizes lm-eval's task-index scan (the same paths
give the same index); everything else is lm-eval's unchanged code.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from replayssm_quant import _lm_eval_autoregister as hook  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

#: (label, lm-eval flags, extra model_args): device x batch_size, each absent / flag / model_args / both
DEVICE = {"none": ([], ""), "flag": (["--device", "cpu"], ""), "margs": ([], ",device=cpu"),
          "both": (["--device", "cuda:0"], ",device=cpu")}
BATCH = {"none": ([], ""), "flag": (["--batch_size", "3"], ""), "margs": ([], ",batch_size=2"),
         "both": (["--batch_size", "3"], ",batch_size=2")}
WANT_BATCH = {"none": 1, "flag": 3, "margs": 2, "both": 2}  # lm-eval's default batch_size is 1
NOTICE = "replayssm: no CUDA GPU visible: running on cpu"

_CHILD = r"""
import json, runpy, site, sys
site.addsitedir(PTH_DIR)
from lm_eval.tasks._index import TaskIndex
_build, _seen = TaskIndex.build, {}
def _memo(paths, **kw):
    key = (tuple(str(p) for p in paths), tuple(sorted(kw.items())))
    if key not in _seen:
        _seen[key] = _build(paths, **kw)
    return dict(_seen[key])
TaskIndex.build = staticmethod(_memo)
for label, argv in RUNS:
    print("@@RUN " + label, file=sys.stderr, flush=True)
    print("@@RUN " + label, flush=True)
    sys.argv = argv
    try:
        runpy.run_module("lm_eval", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if label == "cuda_in_model_args":
            raise  # the last run: its exit is the process's (message on stderr, status 1)
        print("@@EXIT " + repr(e.code), flush=True)
"""


def _argv(flags, margs, out):
    return ["lm_eval", "--model", "replayssm", "--model_args", "pretrained=tiny-qwen3_5,state=fp32" + margs,
            "--tasks", "replayssm_upper", "--limit", "1", "--gen_kwargs", "max_gen_toks=2",
            "--output_path", str(out), *flags]


def _split(text: str) -> dict[str, str]:
    parts, label = {}, None
    for line in text.splitlines():
        if line.startswith("@@RUN "):
            label = line[len("@@RUN "):]
            parts[label] = ""
        elif label is not None:
            parts[label] += line + "\n"
    return parts


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval_cli")
    pth_dir = root / "site"
    pth_dir.mkdir()
    (pth_dir / hook.PTH_NAME).write_text((REPO / hook.PTH_NAME).read_text())
    runs = []
    for d, (dflags, dargs) in DEVICE.items():
        for b, (bflags, bargs) in BATCH.items():
            runs.append((f"{d}-{b}", _argv(dflags + bflags, dargs + bargs, root / f"out-{d}-{b}")))
    runs.append(("cuda_in_model_args", _argv([], ",device=cuda", root / "out-cuda")))
    code = _CHILD.replace("PTH_DIR", repr(str(pth_dir))).replace("RUNS", repr(runs))
    env = {k: v for k, v in os.environ.items() if k != hook.DISABLE_ENV}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="",  # no GPU visible, whatever the machine has
               PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env,
                          timeout=600)
    return root, proc, _split(proc.stdout), _split(proc.stderr)


def _config(out: Path) -> dict:
    files = sorted(out.rglob("results_*.json"))
    assert files, f"no results under {out}"
    return json.loads(files[-1].read_text())["config"]


@pytest.mark.parametrize("d", list(DEVICE))
@pytest.mark.parametrize("b", list(BATCH))
def test_device_and_batch_size_flags_beside_model_args(cli_runs, d, b):
    root, proc, out, err = cli_runs
    label = f"{d}-{b}"
    assert label in out, proc.stderr[-3000:]
    assert "@@EXIT" not in out[label] and "Traceback" not in err[label], err[label][-3000:]
    assert "|replayssm_upper|" in out[label], out[label][-2000:]  # found by name, no --include_path
    cfg = _config(root / f"out-{label}")
    assert cfg["model_device"] == "cpu"
    assert cfg["model_batch_size"] == WANT_BATCH[b]
    # lm-eval's device (its cuda:0 default, or --device cuda:0) falls back to cpu with one notice;
    # device=cpu anywhere else, or in model_args beside --device cuda:0, needs none
    assert err[label].count(NOTICE) == (1 if d == "none" else 0), err[label][-2000:]


def test_cuda_in_model_args_without_gpu_is_one_line_error(cli_runs):
    _, proc, _, err = cli_runs
    assert proc.returncode == 1
    tail = err["cuda_in_model_args"]
    assert "Traceback" not in tail, tail[-3000:]
    last = tail.strip().splitlines()[-1]
    assert last.startswith("error: replayssm: device=cuda: ") and "(device=cpu, or leave device unset)" in last, last
