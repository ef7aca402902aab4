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
    " NVFP4/E4M3+SR ": ("nvfp4", "e4m3", True),
    "bf16/fp16": ("bf16", "fp16", False),
    "e5m2/fp32": ("e5m2", "fp32", False),
    "int8": ("int8", "int8", False),
    "int8/fp16": ("int8", "fp16", False),
    "nvfp4/int8+sr": ("nvfp4", "int8", True),
    "int8/bf16": ("int8", "bf16", False),          # bf16 keeps int8's 7 bits
    "fp8/int8+sr": ("fp8", "int8", True),
    "e4m3/fp8": ("e4m3", "fp8", False),
    "e5m2/fp8": ("e5m2", "fp8", False),
    "e5m2/e4m3": ("e5m2", "e4m3", False),
    "fp8e4m3/fp16": ("e4m3", "fp16", False),
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
    # the recurrence at least as precise as the read copy (issue 30 item 6)
    "fp16/bf16+sr": "fp16 is more precise than recurrence format bf16",
    "fp8/e5m2": "more precise than",
    "e4m3/e5m2": "more precise than",
    "int8/fp8": "more precise than",
    "int8/e4m3": "more precise than",
    "fp8/e4m3+sr": "a row scale if the read format has one",
    "int8/nvfp4": "wider than",
    "nvfp4/nvfp4+sr": "both nvfp4 in 'nvfp4/nvfp4+sr': a separate spec needs a more precise recurrence format "
                      "(e.g. nvfp4/fp32); for one checkpoint write nvfp4+sr",
    "fp32/fp32": "both fp32 in 'fp32/fp32': a separate spec needs a more precise recurrence format; for one "
                 "checkpoint write fp32;",
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
    # row scales: one fp32 per row of K elements, 1 + 4/K bytes per element
    assert parse_state_spec("fp8").step_bytes_per_element("conventional", head_k=128) == pytest.approx(2 * (1 + 4 / 128))
    assert parse_state_spec("nvfp4/int8+sr").step_bytes_per_element("replay", 16, head_k=64) == \
        pytest.approx(0.5625 + 2 * (1 + 4 / 64) / 16)
    assert parse_state_spec("e4m3").step_bytes_per_element("conventional") == 2
    assert parse_state_spec("int8/fp16").state_bytes_per_element(32) == pytest.approx(1 + 4 / 32 + 2)
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
    assert "separate" in out and "stochastic" in out and "8.25 bits/elem at K=128" in out
    read = [ln for ln in out.splitlines() if ln.startswith("read format")]
    assert read and read[0].endswith("round to nearest even)")
    assert main(["spec", "nvfp4+sr"]) == 0     # shared: the reads come from the stochastically rounded checkpoint
    read = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("read format")]
    assert read and read[0].endswith("(the recurrence checkpoint, stochastic rounding)")


@pytest.mark.parametrize("text,mode,window", [("conventional:fp8+sr", "conventional", None),
                                              ("replay@8:nvfp4+sr", "replay", 8),
                                              ("conventional:int8+sr", "conventional", None)])
def test_cli_spec_takes_the_mode_prefix_eval_takes(text, mode, window, capsys):
    assert main(["spec", text]) == 0
    out = capsys.readouterr().out
    assert f"decode mode" in out and mode in out
    if window:
        assert f"window L={window}" in out


def test_cli_spec_precision_rule_one_line(capsys):
    assert main(["spec", "fp16/bf16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at least as precise" in err and "mantissa bits" in err


def test_cli_formats(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for name in ("fp32", "bf16", "fp16", "fp8", "int8", "e4m3", "e5m2", "nvfp4", "448", "8 + 32/K", "8.25"):
        assert name in out
    assert main(["formats", "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("format,")
