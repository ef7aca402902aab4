"""Documents for the KL evaluation (``--data``).

Sources:

* ``None`` (no ``--data``): the embedded held-out Gutenberg books
  (:func:`replayssm_quant.eval.gutenberg.heldout_books`).
* ``"pg19"``: the PG-19 test split through ``datasets`` (parquet mirror
  ``emozilla/pg19-test``, then ``deepmind/pg19`` split ``test``), streamed.
* a path: a ``.txt`` / ``.parquet`` / ``.jsonl`` file or a folder holding such
  files (searched recursively, sorted). Parquet and jsonl rows give one text each
  from the ``text`` column / key (``text_field``).

A document is a window of ``length`` consecutive tokens of one text; each text
gives up to ``per_text`` non-overlapping windows from its start. Texts too short
for one window are skipped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

PG19_MIRRORS = (("emozilla/pg19-test", "test"), ("deepmind/pg19", "test"))
FILE_SUFFIXES = (".txt", ".parquet", ".jsonl")
DATA_FORMS = ("valid --data values: omit it (embedded held-out books), 'pg19' (PG-19 test split via `datasets`), "
              "or a .txt/.parquet/.jsonl file or a folder of them")


@dataclass
class Document:
    """One evaluation document.

    Attributes:
        doc_id: ``"<text name>#<window index>"``.
        tokens: int64 ``[length]``.
    """

    doc_id: str
    tokens: torch.Tensor


def _read_file(path: Path, text_field: str) -> Iterator[tuple[str, str]]:
    if path.suffix == ".txt":
        yield path.stem, path.read_bytes().replace(b"\r\n", b"\n").decode("utf-8", errors="replace")
    elif path.suffix == ".parquet":
        import pandas as pd

        df = pd.read_parquet(path)
        if text_field not in df.columns:
            raise ValueError(f"{path} has no column {text_field!r} (columns: {', '.join(map(str, df.columns))}); "
                             "pick one with --text-field")
        for i, t in enumerate(df[text_field]):
            yield f"{path.stem}[{i}]", str(t)
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{i + 1}: not JSON ({e.msg})") from None
                if not isinstance(row, dict) or text_field not in row:
                    raise ValueError(f"{path}:{i + 1}: no key {text_field!r}; pick one with --text-field")
                yield f"{path.stem}[{i}]", str(row[text_field])


def _local_files(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix not in FILE_SUFFIXES:
            raise ValueError(f"--data {str(path)!r}: unsupported file type {path.suffix or '(none)'}; {DATA_FORMS}")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in FILE_SUFFIXES)
    if not files:
        raise ValueError(f"--data {str(path)!r}: folder holds no .txt/.parquet/.jsonl files; {DATA_FORMS}")
    return files


def _pg19_texts() -> Iterator[tuple[str, str]]:
    try:
        import datasets
    except ImportError:
        raise ValueError("--data pg19 needs the `datasets` package (pip install datasets), or download the PG-19 "
                         "test parquet files and pass --data /path/to/folder") from None
    errors = []
    for name, split in PG19_MIRRORS:
        try:
            ds = datasets.load_dataset(name, split=split, streaming=True)
            it = iter(ds)
            first = next(it)
        except Exception as e:  # noqa: BLE001 - network / hub failures become one user-facing line
            msg = str(e).strip().splitlines()
            errors.append(f"{name}: {msg[0] if msg else type(e).__name__}")
            continue

        def gen(first=first, it=it):
            for i, row in enumerate([first]):
                yield row.get("short_book_title") or f"pg19[{i}]", row["text"]
            for i, row in enumerate(it, start=1):
                yield row.get("short_book_title") or f"pg19[{i}]", row["text"]
        return gen()
    raise ValueError("could not load PG-19 through `datasets` (offline?): " + "; ".join(errors)
                     + ". Download the test parquet files (e.g. the emozilla/pg19-test dataset) and pass "
                     "--data /path/to/folder (or a .txt/.jsonl of your own text)")


def iter_texts(data: str | None, text_field: str = "text") -> tuple[Iterator[tuple[str, str]], int | None]:
    """``(texts, count)``: an iterator of ``(name, text)`` for ``data`` and the number of texts if known.

    Raises:
        ValueError: bad ``data`` (one line, saying what is allowed).
        FileNotFoundError: the embedded books are missing.
    """
    if data is None:
        from .gutenberg import heldout_books, read_book

        books = heldout_books()
        return ((p.stem, read_book(p).decode("utf-8", errors="replace")) for p in books), len(books)
    if data.strip().lower() == "pg19":
        return _pg19_texts(), None
    path = Path(data).expanduser()
    if not path.exists():
        raise ValueError(f"--data {data!r}: no such file or folder; {DATA_FORMS}")
    files = _local_files(path)
    n = len(files) if all(f.suffix == ".txt" for f in files) else None

    def gen():
        for f in files:
            yield from _read_file(f, text_field)
    return gen(), n


def _tokenize_prefix(tokenizer, text: str, need: int) -> list[int]:
    """At least ``need`` tokens from the start of ``text`` (or all of it), tokenizing a growing prefix."""
    chars = max(need * 8, 4096)
    while True:
        ids = tokenizer(text[:chars], add_special_tokens=False)["input_ids"]
        if len(ids) > need or chars >= len(text):
            return ids if chars >= len(text) else ids[:need]
        chars *= 2


def make_documents(texts: Iterable[tuple[str, str]], tokenizer, length: int, max_docs: int,
                   per_text: int | None = None, num_texts: int | None = None) -> list[Document]:
    """Cut up to ``max_docs`` windows of ``length`` tokens from ``texts``.

    ``per_text`` defaults to ``ceil(max_docs / num_texts)`` when the number of texts is known
    (so a few long books give many documents), else 1 (one document per book, PG-19 style).
    """
    if length < 2:
        raise ValueError(f"document length must be >= 2 tokens, got {length}")
    if max_docs < 1:
        raise ValueError(f"--docs must be >= 1, got {max_docs}")
    if per_text is None:
        per_text = math.ceil(max_docs / num_texts) if num_texts else 1
    docs: list[Document] = []
    for name, text in texts:
        want = min(per_text, max_docs - len(docs))
        ids = _tokenize_prefix(tokenizer, text, want * length)
        for j in range(min(want, len(ids) // length)):
            docs.append(Document(f"{name}#{j}", torch.tensor(ids[j * length:(j + 1) * length], dtype=torch.int64)))
        if len(docs) >= max_docs:
            break
    return docs


def load_documents(data: str | None, tokenizer, length: int, max_docs: int, text_field: str = "text",
                   per_text: int | None = None) -> list[Document]:
    """:func:`iter_texts` + :func:`make_documents`; ``ValueError`` if no text is long enough."""
    texts, n = iter_texts(data, text_field)
    docs = make_documents(texts, tokenizer, length, max_docs, per_text, n)
    if not docs:
        src = "the embedded held-out books" if data is None else repr(data)
        raise ValueError(f"no text in {src} has {length} tokens (prefill + tokens + 1); "
                         "use a smaller --prefill/--tokens or longer texts")
    return docs
