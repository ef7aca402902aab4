"""How a KL batch splits its variants between the chunked and the step path."""

import pytest

from replayssm_quant.eval.decode import parse_variant
from replayssm_quant.eval.kl import KLSettings, exec_groups, with_reference


def _vs(*labels):
    return with_reference([parse_variant(v) for v in labels])


def test_exec_groups():
    mixed = _vs("nvfp4+sr", "conventional:fp8+sr", "replay@4:nvfp4/fp8+sr", "conventional:fp16")
    assert exec_groups(mixed, "step") == [("step", [0, 1, 2, 3, 4])]
    assert exec_groups(mixed, "chunked-all") == [("chunked-all", [0, 1, 2, 3, 4])]
    assert exec_groups(mixed, "chunked") == [("chunked", [0, 1, 3]), ("step", [0, 2, 4])]
    assert exec_groups(_vs("nvfp4+sr", "fp16"), "chunked") == [("chunked", [0, 1, 2])]
    assert exec_groups(_vs("conventional:fp8+sr"), "chunked") == [("step", [0, 1])]
    assert exec_groups(_vs(), "chunked") == [("chunked", [0])]


def test_settings_refuse_unknown_exec():
    with pytest.raises(ValueError, match="unknown execution 'fast'; valid: step, chunked, chunked-all$"):
        KLSettings(prefill=1, tokens=1, exec_mode="fast")
