"""Documents for the KL evaluation (``--data``).

Sources:

* ``None`` or ``"sampled"`` (the default): the packaged documents sampled from the fp32
  embedded model (``eval/kl_data/sampled.jsonl``, made by :mod:`.sample_text`; 16 texts of
  4096 bytes). Needs nothing beside the package.
* ``"heldout-books"``: the held-out Gutenberg books
  (:func:`replayssm_quant.eval.gutenberg.heldout_books`; read from the books folder, never shipped).
* ``"pg19"``: the PG-19 test split through ``datasets`` (parquet mirror
  ``emozilla/pg19-test``, then ``deepmind/pg19`` split ``test``), streamed; fails at once offline.
* a path: a ``.txt`` / ``.parquet`` / ``.jsonl`` file or a folder holding such
  files (searched recursively, sorted). Parquet and jsonl rows give one text each
  from the ``text`` column / key (``text_field``).

A document is a window of ``length`` consecutive tokens of one text. When the number of
texts is known (the packaged samples, the books, a folder of .txt files), documents go round
robin over the texts: window 0 of every text, then window 1 of every text, ... (texts too short
for a window drop out). Otherwise (streamed PG-19, parquet/jsonl rows) each text gives one
window. Either way document ``i`` is the same for every ``max_docs > i``, so a run resumed with
more ``--docs`` keeps its earlier documents.
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
SAMPLED, HELDOUT = "sampled", "heldout-books"
DATA_FORMS = (f"valid --data values: {SAMPLED} (the default: text sampled from the embedded model, shipped with the "
              f"package), {HELDOUT} (the held-out Gutenberg books, if present), pg19 (PG-19 test split via "
              "`datasets`, needs the network), or a .txt/.parquet/.jsonl file or a folder of them")


def data_name(data: str | None) -> str:
    """The canonical name of a ``--data`` value (``None`` -> ``"sampled"``), as stored in run.json."""
    if data is None:
        return SAMPLED
    low = data.strip().lower()
    return low if low in (SAMPLED, HELDOUT, "pg19") else data


def describe(data: str | None) -> str:
    """What ``--data`` means, for reports."""
    name = data_name(data)
    if name == SAMPLED:
        return ("sampled: text sampled with a fixed seed from the fp32 embedded gdn-demo model, shipped with the "
                "package (eval/kl_data/sampled.jsonl)")
    if name == HELDOUT:
        return "heldout-books: the held-out Gutenberg books (Austen's Persuasion, Chesterton's Father Brown)"
    if name == "pg19":
        return "pg19: the PG-19 test split"
    return name


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
                if line.strip():
                    yield from _read_jsonl_line(path, i, line, text_field)


def _local_files(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix not in FILE_SUFFIXES:
            raise ValueError(f"--data {str(path)!r}: unsupported file type {path.suffix or '(none)'}; {DATA_FORMS}")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in FILE_SUFFIXES)
    if not files:
        raise ValueError(f"--data {str(path)!r}: folder holds no .txt/.parquet/.jsonl files; {DATA_FORMS}")
    return files


def _check_file(path: Path, text_field: str) -> None:
    """Fail fast (before any model loads) on a parquet/jsonl file without ``text_field``: header / first row only."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pandas' other engine: the full read later says what is missing
            return
        cols = pq.read_schema(path).names
        if text_field not in cols:
            raise ValueError(f"{path} has no column {text_field!r} (columns: {', '.join(map(str, cols))}); "
                             "pick one with --text-field")
    elif path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.strip():
                    next(_read_jsonl_line(path, i, line, text_field))
                    return


def _read_jsonl_line(path: Path, i: int, line: str, text_field: str) -> Iterator[tuple[str, str]]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{i + 1}: not JSON ({e.msg})") from None
    if not isinstance(row, dict) or text_field not in row:
        keys = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
        raise ValueError(f"{path}:{i + 1}: no key {text_field!r} (has: {keys}); pick one with --text-field")
    yield f"{path.stem}[{i}]", str(row[text_field])


def _pg19_texts() -> Iterator[tuple[str, str]]:
    from .hub import offline_reason

    why = offline_reason()
    if why:
        raise ValueError(f"--data pg19 streams from the Hugging Face hub, but {why}. Download the PG-19 test "
                         "parquet files (e.g. the emozilla/pg19-test dataset) elsewhere and pass --data "
                         "/path/to/folder, or use the default --data sampled")
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

    Checks what it can before returning (paths, parquet columns, the first row of each jsonl,
    PG-19 reachability), so a bad ``--data`` fails before a model loads.

    Raises:
        ValueError: bad ``data`` (one line, saying what is allowed).
        FileNotFoundError: the held-out books (``heldout-books``) or the packaged samples are missing.
    """
    name = data_name(data)
    if name == SAMPLED:
        from .sample_text import SAMPLED_FILE

        if not SAMPLED_FILE.is_file():
            raise FileNotFoundError(f"the packaged KL documents {SAMPLED_FILE} are missing; reinstall the package "
                                    f"or pass another --data; {DATA_FORMS}")
        rows = [json.loads(line)["text"] for line in SAMPLED_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
        return ((f"sampled[{i}]", t) for i, t in enumerate(rows)), len(rows)
    if name == HELDOUT:
        from .gutenberg import heldout_books, read_book

        books = heldout_books()
        return ((p.stem, read_book(p).decode("utf-8", errors="replace")) for p in books), len(books)
    if name == "pg19":
        return _pg19_texts(), None
    path = Path(data).expanduser()
    if not path.exists():
        raise ValueError(f"--data {data!r}: no such file or folder; {DATA_FORMS}")
    files = _local_files(path)
    for f in files:
        _check_file(f, text_field)
    n = len(files) if all(f.suffix == ".txt" for f in files) else None

    def gen():
        for f in files:
            yield from _read_file(f, text_field)
    return gen(), n


class _Tokens:
    """Token ids of one text's prefixes, tokenized at fixed sizes (4096 * 2^k characters).

    Window ``j`` always comes from the smallest such prefix with more than ``(j + 1) * length``
    ids (the last id of a cut prefix may differ from the full text's), so a window's tokens never
    depend on how many windows were asked for.
    """

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text, self.levels = tokenizer, text, []

    def window(self, j: int, length: int) -> list[int] | None:
        need = (j + 1) * length
        k = 0
        while True:
            if k == len(self.levels):
                chars = 4096 << k
                ids = self.tokenizer(self.text[:chars], add_special_tokens=False)["input_ids"]
                self.levels.append((ids, chars >= len(self.text)))
            ids, whole = self.levels[k]
            if len(ids) > need or (whole and len(ids) >= need):
                return ids[j * length:need]
            if whole:
                return None
            k += 1


def make_documents(texts: Iterable[tuple[str, str]], tokenizer, length: int, max_docs: int,
                   per_text: int | None = None, num_texts: int | None = None) -> list[Document]:
    """Cut up to ``max_docs`` windows of ``length`` tokens from ``texts``.

    With ``per_text`` given, each text in turn gives up to ``per_text`` windows. Otherwise, when
    ``num_texts`` is known, windows go round robin over the texts (window 0 of each text, then
    window 1, ...); when it is not, each text gives one window (PG-19 style). Document ``i`` never
    depends on ``max_docs``.
    """
    if length < 2:
        raise ValueError(f"document length must be >= 2 tokens, got {length}")
    if max_docs < 1:
        raise ValueError(f"--docs must be >= 1, got {max_docs}")
    docs: list[Document] = []

    def add(name: str, j: int, ids: list[int]) -> bool:
        docs.append(Document(f"{name}#{j}", torch.tensor(ids, dtype=torch.int64)))
        return len(docs) >= max_docs

    if per_text is None and num_texts:
        live = [(name, _Tokens(tokenizer, text)) for name, text in texts]
        j = 0
        while live:
            keep = []
            for name, tk in live:
                ids = tk.window(j, length)
                if ids is None:
                    continue
                if add(name, j, ids):
                    return docs
                keep.append((name, tk))
            live, j = keep, j + 1
        return docs
    for name, text in texts:
        tk = _Tokens(tokenizer, text)
        for j in range(per_text or 1):
            ids = tk.window(j, length)
            if ids is None:
                break
            if add(name, j, ids):
                return docs
    return docs


def load_documents(data: str | None, tokenizer, length: int, max_docs: int, text_field: str = "text",
                   per_text: int | None = None) -> list[Document]:
    """:func:`iter_texts` + :func:`make_documents`; ``ValueError`` if no text is long enough."""
    texts, n = iter_texts(data, text_field)
    docs = make_documents(texts, tokenizer, length, max_docs, per_text, n)
    if not docs:
        src = repr(data_name(data))
        raise ValueError(f"no text in {src} has {length} tokens (prefill + tokens + 1); "
                         "use a smaller --prefill/--tokens or longer texts")
    return docs
