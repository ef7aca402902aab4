"""The Gutenberg books (``../shared/data/gutenberg`` beside the repository) and their split.

The books are read at run time, never copied into the repository. The folder is found, in
order, from an explicit ``data_dir`` argument, the environment variable
``REPLAYSSM_GUTENBERG_DIR``, or the first of ``<repo root>/../shared/data/gutenberg``,
``<repo root>/shared/data/gutenberg`` (source checkouts), ``<cwd>/../shared/data/gutenberg``,
``<cwd>/shared/data/gutenberg`` (an installed package run from the checkout) that exists.

Split (whole books): the held-out evaluation books are :data:`HELDOUT_BOOKS`
(Austen's *Persuasion* and Chesterton's *The Wisdom of Father Brown*, 0.87 MB together); every
other ``*.txt`` book in the folder is training data. Both authors also have other books in the
training set, so held-out text is in-distribution but never seen verbatim.

Text is bytes: :func:`read_book` returns the file's bytes with CRLF line ends turned into LF
(Moby Dick is stored with CRLF), nothing else changed.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "REPLAYSSM_GUTENBERG_DIR"
#: file names of the held-out (evaluation) books
HELDOUT_BOOKS = ("austen-persuasion.txt", "chesterton-brown.txt")
_REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The Gutenberg folder: ``path``, else ``$REPLAYSSM_GUTENBERG_DIR``, else ``<repo>/../shared/data/gutenberg``.

    Raises FileNotFoundError (saying where it looked and how to point elsewhere) if it has no books.
    """
    if path is None:
        path = os.environ.get(ENV_VAR)
    if path is None:
        rel = Path("shared") / "data" / "gutenberg"
        candidates = [_REPO_ROOT.parent / rel, _REPO_ROOT / rel, Path.cwd().parent / rel, Path.cwd() / rel]
        path = next((c for c in candidates if c.is_dir()), candidates[0])
    p = Path(path).expanduser()
    if not p.is_dir() or not any(p.glob("*.txt")):
        raise FileNotFoundError(
            f"no Gutenberg books (*.txt) in {p}; pass --data-dir or set {ENV_VAR} to the folder "
            f"holding the books (default: ../shared/data/gutenberg beside the repository or the "
            f"current directory)")
    return p


def all_books(path=None) -> list[Path]:
    """Every ``*.txt`` book in the folder, sorted by name."""
    return sorted(data_dir(path).glob("*.txt"))


def heldout_books(path=None) -> list[Path]:
    """The held-out evaluation books (:data:`HELDOUT_BOOKS`), sorted by name.

    Raises FileNotFoundError if one of them is missing from the folder.
    """
    d = data_dir(path)
    out = []
    for name in HELDOUT_BOOKS:
        if not (d / name).is_file():
            raise FileNotFoundError(f"held-out book {name} is missing from {d}")
        out.append(d / name)
    return sorted(out)


def train_books(path=None) -> list[Path]:
    """All books except the held-out ones, sorted by name."""
    held = set(HELDOUT_BOOKS)
    books = [p for p in all_books(path) if p.name not in held]
    if not books:
        raise FileNotFoundError(f"no training books in {data_dir(path)} (only held-out books found)")
    return books


def read_book(path: str | os.PathLike) -> bytes:
    """A book's bytes with CRLF normalised to LF."""
    return Path(path).read_bytes().replace(b"\r\n", b"\n")


def read_books(paths) -> list[bytes]:
    """:func:`read_book` for each path."""
    return [read_book(p) for p in paths]
