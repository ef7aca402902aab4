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


def test_pg19_offline_fails_at_once(monkeypatch, tok):
    """Offline (a variable set, or the hub's host not answering): no call into `datasets`, no retries."""
    from replayssm_quant.eval import hub

    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("load_dataset called while offline"))
    for var in hub.OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_DATASETS_OFFLINE=1 is set.*--data /path/to/folder"):
        D.iter_texts("pg19")
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")         # nothing listens on the discard port
    hub._unreachable.cache_clear()
    with pytest.raises(ValueError, match="127.0.0.1:9 is not reachable"):
        D.iter_texts("pg19")


def test_pg19_hub_error_says_how_to_use_local_files(monkeypatch, tok):
    from replayssm_quant.eval import hub

    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(hub, "offline_reason", lambda: None)

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach the Hugging Face Hub (offline mode)\nsecond line")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError) as e:
        D.load_documents("pg19", tok, 10, 1)
    msg = str(e.value)
    assert "emozilla/pg19-test" in msg and "--data /path/to/folder" in msg and "\n" not in msg


def test_pg19_streams_books(monkeypatch, tok):
    datasets = pytest.importorskip("datasets")
    from replayssm_quant.eval import hub

    monkeypatch.setattr(hub, "offline_reason", lambda: None)
    rows = [{"short_book_title": f"book{i}", "text": "w" * (40 + 10 * i)} for i in range(5)]
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split, streaming: iter(rows))
    docs = D.load_documents("pg19", tok, 45, 3)
    assert [d.doc_id for d in docs] == ["book1#0", "book2#0", "book3#0"]   # book0 too short


def test_heldout_books_round_robin(tmp_path, monkeypatch, tok):
    """--data heldout-books reads the books folder; documents alternate between the books."""
    from replayssm_quant.eval import gutenberg

    for name, c in zip(gutenberg.HELDOUT_BOOKS, "ab"):
        (tmp_path / name).write_bytes((c * 300).encode())
    monkeypatch.setenv(gutenberg.ENV_VAR, str(tmp_path))
    docs = D.load_documents("heldout-books", tok, 64, 5)
    stems = [b.removesuffix(".txt") for b in sorted(gutenberg.HELDOUT_BOOKS)]
    assert [d.doc_id for d in docs] == [f"{stems[0]}#0", f"{stems[1]}#0", f"{stems[0]}#1", f"{stems[1]}#1",
                                        f"{stems[0]}#2"]
    assert set(docs[1].tokens.tolist()) == {ord("b")}


def test_document_i_does_not_depend_on_max_docs(tmp_path, tok):
    """Asking for more documents keeps the earlier ones (a resumed run with a larger --docs adds, never shifts)."""
    (tmp_path / "a.txt").write_text("".join(chr(97 + i % 26) for i in range(5000)))
    (tmp_path / "b.txt").write_text("".join(chr(65 + i % 26) for i in range(900)))
    runs = [D.load_documents(str(tmp_path), tok, 300, k) for k in (1, 2, 3, 4, 7)]
    longest = runs[-1]
    assert [d.doc_id for d in longest] == ["a#0", "b#0", "a#1", "b#1", "a#2", "b#2", "a#3"]
    for docs in runs:
        assert [d.doc_id for d in docs] == [d.doc_id for d in longest[:len(docs)]]
        assert all(d.tokens.tolist() == e.tokens.tolist() for d, e in zip(docs, longest))


def test_default_data_is_packaged_and_needs_no_books(tmp_path, monkeypatch, tok):
    """No --data: the sampled documents shipped in the package, with the books folder hidden."""
    from replayssm_quant.eval import gutenberg
    from replayssm_quant.eval.sample_text import SAMPLED_FILE

    monkeypatch.setenv(gutenberg.ENV_VAR, str(tmp_path))          # an empty folder: no books anywhere
    with pytest.raises(FileNotFoundError):
        gutenberg.heldout_books()
    assert SAMPLED_FILE.is_relative_to(D.Path(D.__file__).parent)  # inside the package
    texts = [t for _, t in D.iter_texts(None)[0]]
    assert len(texts) >= 16 and min(len(t.encode()) for t in texts) >= 4096
    docs = D.load_documents(None, tok, 256 + 256 + 1, 32)           # the defaults fit, twice per text
    assert len(docs) == 32 and [d.doc_id for d in docs[:2]] == ["sampled[0]#0", "sampled[1]#0"]
    assert D.data_name(None) == D.data_name("Sampled") == "sampled"


def test_jsonl_without_text_field_fails_before_reading(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text(json.dumps({"body": "x" * 100}) + "\n")
    with pytest.raises(ValueError, match="rows.jsonl:1: no key 'text' \\(has: body\\).*--text-field"):
        D.iter_texts(str(p))             # not only when the documents are cut (after the model loaded)
