"""Where the Gutenberg books are found when the package is installed (not run from source)."""

import pytest

from replayssm_quant.eval import gutenberg


def _fake_books(root):
    d = root / "shared" / "data" / "gutenberg"
    d.mkdir(parents=True)
    (d / "a.txt").write_text("x")
    return d


def test_installed_package_finds_books_beside_the_working_directory(tmp_path, monkeypatch):
    books = _fake_books(tmp_path)
    checkout = tmp_path / "main"
    checkout.mkdir()
    monkeypatch.delenv(gutenberg.ENV_VAR, raising=False)
    monkeypatch.setattr(gutenberg, "_REPO_ROOT", tmp_path / "site-packages" / "replayssm_quant")
    monkeypatch.chdir(checkout)
    assert gutenberg.data_dir() == books


def test_missing_books_error_says_how_to_point_elsewhere(tmp_path, monkeypatch):
    monkeypatch.delenv(gutenberg.ENV_VAR, raising=False)
    monkeypatch.setattr(gutenberg, "_REPO_ROOT", tmp_path / "a" / "b")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=gutenberg.ENV_VAR):
        gutenberg.data_dir()
