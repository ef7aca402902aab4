"""State-spec grammar (quant/spec.py) and the `formats` / `spec` CLI commands."""

import subprocess
import sys

import pytest

from replayssm_quant.cli import main
from replayssm_quant.quant import parse_state_spec

GOOD = {
    "fp32": ("fp32", "fp32", False),
    "fp8": ("fp8", "fp8", False),
    "nvfp4+sr": ("nvfp4", "nvfp4", True),
    "nvfp4/fp8+sr": ("nvfp4", "fp8", True),
    "nvfp4/fp16": ("nvfp4", "fp16", False),
    "fp8/fp16": ("fp8", "fp16", False),
    " NVFP4/E4M3+SR ": ("nvfp4", "fp8", True),
    "bf16/fp16": ("bf16", "fp16", False),
    "fp16/bf16+sr": ("fp16", "bf16", True),
    "e5m2/fp32": ("e5m2", "fp32", False),
}


@pytest.mark.parametrize("text,want", list(GOOD.items()))
def test_good_specs(text, want):
    s = parse_state_spec(text)
    assert (s.read.name, s.recur.name, s.sr) == want
    assert s.shared == (want[0] == want[1])
    assert parse_state_spec(s.text) == s


BAD = {
    "fp4": "fp4",
    "fp8/": "missing format",
    "/fp8": "missing format",
    "nvfp4//fp8": "too many",
    "+rs": "+rs",
    "fp8+rs": "+rs",
    "fp16/fp8": "wider",
    "fp32/nvfp4": "wider",
    "": "empty",
    "   ": "empty",
    "fp32+sr": "rounds nothing",
    "fp8/fp32+sr": "rounds nothing",
    "fp8/fp16/fp32": "too many",
    "+sr": "missing format before '+sr'",
    "fp8/ +sr": "missing format around '/'",
    "fp8+sr+sr": "+sr+sr",
}


@pytest.mark.parametrize("text,part", list(BAD.items()))
def test_bad_specs_name_the_bad_part(text, part):
    with pytest.raises(ValueError) as e:
        parse_state_spec(text)
    msg = str(e.value)
    assert part in msg and "valid forms" in msg


def test_non_string_spec():
    with pytest.raises(ValueError, match="must be a string"):
        parse_state_spec(8)


def test_step_bytes():
    assert parse_state_spec("fp32").step_bytes_per_element("conventional") == 8
    assert parse_state_spec("fp32").step_bytes_per_element("replay", 16) == pytest.approx(4.25)
    assert parse_state_spec("nvfp4/fp16").step_bytes_per_element("replay", 16) == pytest.approx(0.5625 + 0.25)
    with pytest.raises(ValueError, match="conventional"):
        parse_state_spec("nvfp4/fp16").step_bytes_per_element("conventional")


@pytest.mark.parametrize("bad", ["fp8/", "nvfp4//fp8", "+rs", "fp32+sr", ""])
def test_cli_spec_error_one_line_exit_2(bad, capsys):
    assert main(["spec", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "error" in err


def test_cli_spec_subprocess_no_traceback():
    r = subprocess.run([sys.executable, "-m", "replayssm_quant.cli", "spec", "nvfp4//fp8"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "too many" in r.stderr


def test_cli_spec_good(capsys):
    assert main(["spec", "nvfp4/fp8+sr"]) == 0
    out = capsys.readouterr().out
    assert "separate" in out and "stochastic" in out


def test_cli_formats(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for name in ("fp32", "bf16", "fp16", "fp8", "e5m2", "nvfp4", "448"):
        assert name in out
    assert main(["formats", "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("format,")
