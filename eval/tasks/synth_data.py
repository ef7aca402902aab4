"""Dataset loader and scorer for the packaged synthetic lm-eval tasks (see the YAML files here).

lm-eval imports this file by path (``!function synth_data.load``), so it finds its data
next to itself whatever the working directory, and needs no network.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(synth_task: str, **_metadata):
    """``DatasetDict(test=...)`` of ``synth_<synth_task>.jsonl`` (fields prompt, target, task, gen_len).

    Extra keyword arguments (lm-eval passes the run's metadata / model_args) are ignored.
    """
    import hashlib

    import datasets
    import pyarrow as pa

    path = HERE / f"synth_{synth_task}.jsonl"
    if not path.exists():
        have = sorted(p.stem[len("synth_"):] for p in HERE.glob("synth_*.jsonl"))
        raise FileNotFoundError(f"no data file {path} for synthetic task {synth_task!r}; available: {have}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r.pop("until", None)  # a list column; the stop string lives in the YAML
    # An explicit fingerprint (hash of the file) spares datasets from hashing the table with dill, which
    # fails when pyarrow is imported from outside a 'site-packages' folder (pip --target installs):
    # dill then pickles the pyarrow module by value.
    fp = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    table = datasets.Dataset(pa.Table.from_pylist(rows), fingerprint=f"replayssm_synth_{synth_task}_{fp}")
    return datasets.DatasetDict({"test": table})


def process_results(doc: dict, results: list[str]) -> dict:
    """``{"exact_match": 1.0 | 0.0}`` by the task family's own scorer (synthetic_tasks.score)."""
    from replayssm_quant.eval.synthetic_tasks import score

    return {"exact_match": float(score(results[0], doc["target"]))}
