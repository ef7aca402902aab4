"""--data loaders: local .txt / .parquet / .jsonl files and folders, windows, and clear errors."""

import json

import pandas as pd
import pytest

from replayssm_quant.eval import data as D
from replayssm_quant.eval.models.tokenizer import build_byte_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def test_txt_file_windows(tmp_path, tok):
    text = "".join(chr(97 + i % 26) for i in range(1000))
    p = tmp_path / "book.txt"
    p.write_bytes(text.replace("a", "a\r\n", 1).encode())
    docs = D.load_documents(str(p), tok, length=100, max_docs=3)
    assert [d.doc_id for d in docs] == ["book#0", "book#1", "book#2"]
    assert bytes(docs[0].tokens.tolist()) == text.replace("a", "a\n", 1).encode()[:100]   # CRLF -> LF
    assert bytes(docs[1].tokens.tolist()) == text.replace("a", "a\n", 1).encode()[100:200]
    assert all(d.tokens.dtype.is_floating_point is False and d.tokens.shape == (100,) for d in docs)


def test_folder_of_mixed_files(tmp_path, tok):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("x" * 50)                      # too short: skipped
    pd.DataFrame({"text": ["p" * 300, "q" * 10]}).to_parquet(tmp_path / "sub" / "b.parquet")
    with open(tmp_path / "c.jsonl", "w") as f:
        f.write(json.dumps({"text": "j" * 200}) + "\n\n" + json.dumps({"text": "k" * 250}) + "\n")
    (tmp_path / "ignored.md").write_text("m" * 500)
    docs = D.load_documents(str(tmp_path), tok, length=120, max_docs=10, per_text=1)
    assert [d.doc_id for d in docs] == ["c[0]#0", "c[2]#0", "b[0]#0"]
    assert set(docs[2].tokens.tolist()) == {ord("p")}


def test_bad_data_values(tmp_path, tok):
    with pytest.raises(ValueError, match="no such file or folder.*pg19"):
        D.load_documents(str(tmp_path / "nope"), tok, 10, 1)
    (tmp_path / "x.csv").write_text("text\nabc\n")
    with pytest.raises(ValueError, match="unsupported file type .csv"):
        D.load_documents(str(tmp_path / "x.csv"), tok, 10, 1)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no .txt/.parquet/.jsonl"):
        D.load_documents(str(empty), tok, 10, 1)
    pd.DataFrame({"body": ["a" * 30]}).to_parquet(tmp_path / "y.parquet")
    with pytest.raises(ValueError, match="no column 'text'.*body.*--text-field"):
        D.load_documents(str(tmp_path / "y.parquet"), tok, 10, 1)
    assert len(D.load_documents(str(tmp_path / "y.parquet"), tok, 10, 1, text_field="body")) == 1
    (tmp_path / "z.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="z.jsonl:1: not JSON"):
        D.load_documents(str(tmp_path / "z.jsonl"), tok, 10, 1)
    (tmp_path / "s.txt").write_text("short")
    with pytest.raises(ValueError, match="has 10 tokens.*smaller --prefill"):
        D.load_documents(str(tmp_path / "s.txt"), tok, 10, 1)


def test_pg19_offline_error_says_how_to_use_local_files(monkeypatch, tok):
    datasets = pytest.importorskip("datasets")

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach the Hugging Face Hub (offline mode)\nsecond line")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError) as e:
        D.load_documents("pg19", tok, 10, 1)
    msg = str(e.value)
    assert "emozilla/pg19-test" in msg and "--data /path/to/folder" in msg and "\n" not in msg


def test_pg19_streams_books(monkeypatch, tok):
    datasets = pytest.importorskip("datasets")
    rows = [{"short_book_title": f"book{i}", "text": "w" * (40 + 10 * i)} for i in range(5)]
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split, streaming: iter(rows))
    docs = D.load_documents("pg19", tok, 45, 3)
    assert [d.doc_id for d in docs] == ["book1#0", "book2#0", "book3#0"]   # book0 too short


def test_embedded_heldout_books(tok):
    from replayssm_quant.eval import gutenberg

    try:
        books = gutenberg.heldout_books()
    except FileNotFoundError:
        pytest.skip("Gutenberg books not present beside the repository")
    docs = D.load_documents(None, tok, 64, 4)
    assert len(docs) == 4 and {d.doc_id.split("#")[0] for d in docs} == {b.stem for b in books}
    assert bytes(docs[0].tokens.tolist()) == gutenberg.read_book(books[0])[:64]
