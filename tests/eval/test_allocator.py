"""eval/allocator.py: expandable segments unless the user chose the allocator's setting."""

from replayssm_quant.eval.allocator import ALLOC_CONF_VARS, EXPANDABLE_SEGMENTS, use_expandable_segments


def test_sets_expandable_segments_when_unset(monkeypatch):
    for var in ALLOC_CONF_VARS:
        monkeypatch.delenv(var, raising=False)
    assert use_expandable_segments() == EXPANDABLE_SEGMENTS
    import os
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == EXPANDABLE_SEGMENTS


def test_keeps_the_users_setting(monkeypatch):
    for var in ALLOC_CONF_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:128")
    assert use_expandable_segments() == "max_split_size_mb:128"
    import os
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
