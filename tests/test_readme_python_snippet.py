"""The README's Python API snippet runs as written (copied into a fresh namespace, on CPU)."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def test_python_blocks_extraction():
    md = "a\n```python\nx = 1\n```\ntext\n```bash\nls\n```\n```python\ny = 2\nz = 3\n```\n"
    assert python_blocks(md) == ["x = 1\n", "y = 2\nz = 3\n"]


def test_readme_python_snippet_runs_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU machine, whatever this one has
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no ```python block"
    for block in blocks:
        ns: dict = {"__name__": "readme_snippet"}
        exec(compile(block, f"{README}:python", "exec"), ns)
    # the snippet's last step: one decode step of a batch, float32 [B, HV, V], finite, not all zero
    o = ns["o"]
    assert o.dtype == torch.float32 and o.device.type == "cpu"
    assert tuple(o.shape) == (ns["B"], ns["HV"], ns["V"])
    assert torch.isfinite(o).all() and o.abs().sum() > 0
    assert ns["x_back"].shape == ns["x"].shape and (ns["x_back"] - ns["x"]).abs().max() < ns["x"].abs().max()
