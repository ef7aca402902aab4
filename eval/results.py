"""Incremental results store of a KL run (one folder, resumable).

Layout of ``DIR``::

    run.json                      the run's settings (a resumed run must match them); written once the
                                  model has loaded and the documents are cut, so a run failing
                                  earlier leaves no settings behind
    .lock                         the pid of the run writing the folder (a second run is refused;
                                  a lock left by a dead process is taken over)
    records/<doc>/<variant>.npz   kl, nll, top1, dp float32 [N] of one (document, variant) (eval.kl_stats)
    records/<doc>/<variant>.json  its metadata; written last, so its presence marks the record done
    batches/<batch>.json          timing of each processed batch (throughput; not part of results)

Records are written atomically (temporary file, then rename), so an interrupted
run loses at most the batch in flight and a rerun with the same settings resumes.
A record's metadata names its document (``doc_id`` and ``tokens_sha``, a hash of its
tokens); a resumed run whose document ``i`` differs is refused.

Only the report's CSVs are needed to regenerate the report (``records/`` is for resuming).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

#: run.json keys a resumed run must agree on (``model_hash``: a content hash of the weights and config;
#: ``weights_dtype``: the dtype the weights loaded in, e.g. bfloat16 for ``--dtype auto`` of a bf16 checkpoint)
RESUME_KEYS = ("model", "model_hash", "weights_dtype", "data", "text_field", "prefill", "tokens", "window", "seed",
               "batch_docs")
#: the keys known before the model loads (checked first, so a mismatch fails before loading)
EARLY_KEYS = tuple(k for k in RESUME_KEYS if k not in ("model_hash", "weights_dtype"))


def tokens_sha(tokens) -> str:
    """A short hash of a document's token ids (int64), naming the document in its records."""
    return hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes()).hexdigest()[:16]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        self._locked = self._created = False
        self._pending: dict | None = None

    # ---- the folder and its lock ------------------------------------------------------
    def acquire(self) -> None:
        """Create the folder if needed and take its lock (``.lock`` holding this pid).

        Raises:
            ValueError: the path is a file, cannot be written, or another live process holds the lock.
        """
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"--out {str(self.root)!r} is a file, not a folder; pass a folder (new or a run to resume)")
        try:
            self._created = not self.root.exists()
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"--out {str(self.root)!r}: cannot create the folder ({e.strerror}); pass a writable folder") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise ValueError(f"--out {str(self.root)!r} is not writable; pass a writable folder")
        lock = self.root / ".lock"
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    pid = int(lock.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    pid = None
                if pid is not None and pid != os.getpid() and _pid_alive(pid):
                    raise ValueError(f"{self.root} is in use by another run (pid {pid}, lock file {lock}); wait for "
                                     "it to finish or pass another --out") from None
                lock.unlink(missing_ok=True)          # stale: its process is gone
                continue
            except OSError as e:
                raise ValueError(f"--out {str(self.root)!r}: cannot write there ({e.strerror}); pass a writable "
                                 "folder") from None
            with os.fdopen(fd, "w") as f:
                f.write(f"{os.getpid()}\n")
            self._locked = True
            return
        raise ValueError(f"cannot take the lock {lock}; remove it if no run is using {self.root}")

    def release(self) -> None:
        """Drop the lock taken by :meth:`acquire` (no-op otherwise); a folder it created and left empty goes too."""
        if self._locked:
            (self.root / ".lock").unlink(missing_ok=True)
            self._locked = False
            if self._created and not any(self.root.iterdir()):
                self.root.rmdir()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    # ---- settings -------------------------------------------------------------------
    def read_config(self) -> dict | None:
        p = self.root / "run.json"
        return json.loads(p.read_text()) if p.is_file() else None

    def check(self, config: dict, keys=RESUME_KEYS) -> dict | None:
        """The folder's run.json if it agrees with ``config`` on ``keys`` (``None`` for a new folder).

        Raises:
            ValueError: ``DIR`` holds a run with other settings (one line naming them).
        """
        old = self.read_config()
        if old is not None:
            diff = [f"{k}: {old.get(k)!r} there vs {config.get(k)!r} now" for k in keys if old.get(k) != config.get(k)]
            if diff:
                raise ValueError(f"{self.root} holds a run with other settings ({'; '.join(diff)}); "
                                 "use another --out or the same settings to resume")
        return old

    def check_docs(self, docs) -> None:
        """Every finished record's document must be ``docs[i]`` (same ``doc_id`` and token hash).

        Raises:
            ValueError: a record was made from another document (the data or its cutting changed).
        """
        seen = set()
        for meta_path in sorted((self.root / "records").glob("d*/*.json")):
            meta = json.loads(meta_path.read_text())
            i = int(meta_path.parent.name[1:])
            if i in seen or i >= len(docs):
                continue
            seen.add(i)
            if meta.get("doc_id") != docs[i].doc_id:
                raise ValueError(f"{self.root}: document {doc_key(i)} there is {meta.get('doc_id')!r}, now it would be "
                                 f"{docs[i].doc_id!r} (other data); use another --out")
            if meta.get("tokens_sha", tokens_sha(docs[i].tokens)) != tokens_sha(docs[i].tokens):
                raise ValueError(f"{self.root}: document {doc_key(i)} ({docs[i].doc_id!r}) has other tokens now than "
                                 "when its records were made (the data or the tokenizer changed); use another --out")

    def open(self, config: dict, docs=None) -> None:
        """Start or resume: check ``config`` agrees with ``config`` on :data:`RESUME_KEYS`
        (and, given ``docs``, that the finished records were made from the same documents). ``run.json``
        (new, or with the variants and documents merged) is written with the first record or batch.

        Variants and the number of documents may grow between runs (new records are added).

        Raises:
            ValueError: ``DIR`` holds a run with other settings or other documents.
        """
        old = self.check(config)
        if docs is not None:
            self.check_docs(docs)
        if old is not None:
            merged = dict(old)
            merged["variants"] = list(dict.fromkeys(old.get("variants", []) + config.get("variants", [])))
            merged["docs"] = max(old.get("docs", 0), config.get("docs", 0))
            # the commands and execution modes that made the folder's records (a resume may add documents,
            # variants, or run the rest in another --exec): all of them, in order
            calls = old.get("commands", [old.get("command")]) + [config.get("command")]
            merged["commands"] = list(dict.fromkeys(c for c in calls if c))
            modes = [m for m in str(old.get("exec") or "").split(", ") + [config.get("exec")] if m]
            merged["exec"] = ", ".join(dict.fromkeys(modes)) or None
            config = merged
        self._pending = config

    def _commit_config(self) -> None:
        # run.json goes down with the first result, so a run failing before it computed anything
        # (model load, kernel set-up) leaves no settings that would refuse the next run
        if self._pending is not None:
            _write_json(self.root / "run.json", self._pending)
            self._pending = None

    def update_config(self, **fields) -> None:
        """Add or replace fields of ``run.json`` (e.g. the peak memory per phase, known at the end of a run); before
        the first result (run.json not written yet) into the settings it will be written with."""
        if self._pending is not None:
            self._pending.update(fields)
            return
        cfg = self.read_config() or {}
        cfg.update(fields)
        _write_json(self.root / "run.json", cfg)

    # ---- records ----------------------------------------------------------------------
    def _base(self, doc: int, slug: str) -> Path:
        return self.root / "records" / doc_key(doc) / slug

    def record_count(self) -> int:
        """How many finished records the folder holds."""
        return sum(1 for _ in (self.root / "records").glob("d*/*.json"))

    def done(self, doc: int, slug: str) -> bool:
        return self._base(doc, slug).with_suffix(".json").is_file()

    def write_record(self, doc: int, slug: str, meta: dict, kl: np.ndarray, nll: np.ndarray, **more: np.ndarray) -> None:
        """Store one (document, variant) record: arrays first, then the metadata that marks it done.

        ``more``: further per-position float32 arrays ``[N]`` (the KL harness writes ``top1`` and ``dp``,
        :mod:`.kl_stats`)."""
        self._commit_config()
        base = self._base(doc, slug)
        arrays = {"kl": kl, "nll": nll, **more}

        def save(p: Path) -> None:
            with open(p, "wb") as f:  # a file object: np.savez would append ".npz" to a path
                np.savez(f, **{k: np.asarray(a, np.float32) for k, a in arrays.items()})
        _atomic_write(base.with_suffix(".npz"), save)
        _write_json(base.with_suffix(".json"), meta)

    def write_batch(self, batch: int, meta: dict) -> None:
        """Timing of batch ``batch``; a later call that runs the batch again (added variants) keeps the earlier
        timing beside it (``b0000.1.json``, ...)."""
        self._commit_config()
        path, k = self.root / "batches" / f"b{batch:04d}.json", 0
        while path.exists():
            k += 1
            path = self.root / "batches" / f"b{batch:04d}.{k}.json"
        _write_json(path, meta)

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
