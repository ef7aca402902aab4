"""Incremental results store of a KL run (one folder, resumable).

Layout of ``DIR``::

    run.json                      the run's settings (a resumed run must match them)
    records/<doc>/<variant>.npz   kl, nll, top1, dp float32 [N] of one (document, variant) (eval.kl_stats)
    records/<doc>/<variant>.json  its metadata; written last, so its presence marks the record done
    batches/<batch>.json          timing of each processed batch (throughput; not part of results)

Records are written atomically (temporary file, then rename), so an interrupted
run loses at most the batch in flight and a rerun with the same settings resumes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

#: run.json keys a resumed run must agree on
RESUME_KEYS = ("model", "data", "text_field", "prefill", "tokens", "window", "seed", "batch_docs")


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _write_json(path: Path, obj) -> None:
    _atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n"))


def doc_key(index: int) -> str:
    """Folder name of document ``index``: ``d0000``."""
    return f"d{index:04d}"


class ResultsStore:
    """The folder of one KL run."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # ---- settings -------------------------------------------------------------------
    def read_config(self) -> dict | None:
        p = self.root / "run.json"
        return json.loads(p.read_text()) if p.is_file() else None

    def open(self, config: dict) -> None:
        """Start or resume: write ``run.json``, or check it agrees with ``config`` on :data:`RESUME_KEYS`.

        Variants and the number of documents may grow between runs (new records are added).

        Raises:
            ValueError: ``DIR`` holds a run with other settings.
        """
        old = self.read_config()
        if old is not None:
            diff = [f"{k}: {old.get(k)!r} there vs {config.get(k)!r} now" for k in RESUME_KEYS if old.get(k) != config.get(k)]
            if diff:
                raise ValueError(f"{self.root} holds a run with other settings ({'; '.join(diff)}); "
                                 "use another --out or the same settings to resume")
            merged = dict(old)
            merged["variants"] = list(dict.fromkeys(old.get("variants", []) + config.get("variants", [])))
            merged["docs"] = max(old.get("docs", 0), config.get("docs", 0))
            config = merged
        _write_json(self.root / "run.json", config)

    # ---- records ----------------------------------------------------------------------
    def _base(self, doc: int, slug: str) -> Path:
        return self.root / "records" / doc_key(doc) / slug

    def done(self, doc: int, slug: str) -> bool:
        return self._base(doc, slug).with_suffix(".json").is_file()

    def write_record(self, doc: int, slug: str, meta: dict, kl: np.ndarray, nll: np.ndarray, **more: np.ndarray) -> None:
        """Store one (document, variant) record: arrays first, then the metadata that marks it done.

        ``more``: further per-position float32 arrays ``[N]`` (the KL harness writes ``top1`` and ``dp``,
        :mod:`.kl_stats`)."""
        base = self._base(doc, slug)
        arrays = {"kl": kl, "nll": nll, **more}
        def save(p: Path) -> None:
            with open(p, "wb") as f:  # a file object: np.savez would append ".npz" to a path
                np.savez(f, **{k: np.asarray(a, np.float32) for k, a in arrays.items()})
        _atomic_write(base.with_suffix(".npz"), save)
        _write_json(base.with_suffix(".json"), meta)

    def write_batch(self, batch: int, meta: dict) -> None:
        _write_json(self.root / "batches" / f"b{batch:04d}.json", meta)

    def records(self) -> list[tuple[dict, dict]]:
        """Every finished record as ``(meta, {"kl": array, "nll": array})``, sorted by (doc, variant)."""
        out = []
        for meta_path in sorted((self.root / "records").glob("d*/*.json")):
            meta = json.loads(meta_path.read_text())
            with np.load(meta_path.with_suffix(".npz")) as z:
                arrays = {k: z[k] for k in z.files}
            out.append((meta, arrays))
        return out

    def batches(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted((self.root / "batches").glob("b*.json"))]
