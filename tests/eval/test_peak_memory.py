"""eval/peak_memory.py: phases recorded, repeated phases keep their maximum, unknown phases refused."""

import pytest

from replayssm_quant.eval.peak_memory import PhaseMemory, _max, gib


def test_phases_on_cpu():
    m = PhaseMemory()
    m.cuda = False            # what a CPU machine measures, also where a GPU is present
    with m.phase("load"):
        big = bytearray(8 << 20)          # noqa: F841 - touches memory
    with m.phase("prefill"):
        pass
    d = m.as_dict()
    assert set(d) == {"note", "load", "prefill"} and "not measurable" in d["note"]
    assert d["load"]["peak_allocated_bytes"] is None and d["load"]["peak_rss_bytes"] >= 8 << 20
    with pytest.raises(ValueError, match="unknown memory phase 'train'; valid: load, prefill, decode"):
        with m.phase("train"):
            pass


def test_repeated_phase_keeps_the_maximum():
    assert _max(None, 5) == 5 and _max(7, 5) == 7 and _max([1, 9], [4, 2]) == [4, 9]
    assert gib(None) == "n/a" and gib(3 * 2 ** 30) == "3.00 GiB"
