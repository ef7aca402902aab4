"""The queued device-call scripts (reports/bench/speed/call_*.sh, not run yet) are well formed before GPU time is spent
on them: bash syntax, the scripts and test files they call exist, and every family, spec and launcher knob set they
pass parses (a misspelled knob or spec would otherwise fail on the device, minutes into a call)."""

import os
import re
import shlex
import subprocess

import pytest

from replayssm_quant.kernels.bench import parse_knobs
from replayssm_quant.kernels.launch import LaunchKnobs
from replayssm_quant.kernels.naive import DELTA_RULE
from replayssm_quant.quant.spec import parse_state_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEED = os.path.join(ROOT, "reports", "bench", "speed")
#: the call scripts the speed README's status lists as queued (not run yet), in its order of priority
QUEUED = ("call_s19a.sh", "call_s22d.sh", "call_s19b.sh", "call_s16b.sh")


def _expanded_text(path: str) -> str:
    """The script with its line continuations joined, its simple ``NAME="value"`` variables substituted and every
    ``${NAME:-default}`` replaced by its default (what the script runs when the caller sets nothing)."""
    text = open(path).read().replace("\\\n", " ")
    text = re.sub(r"\$\{[A-Z][A-Z0-9_]*:-([^}$]*)\}", r"\1", text)
    for name, value in re.findall(r'^([A-Z][A-Z0-9_]*)="([^"$]*)"$', text, flags=re.M):
        text = re.sub(r"\$\{?%s\}?(?![A-Za-z0-9_])" % name, value, text)
    return text


def _option_values(text: str, option: str) -> list[str]:
    """Every value given to ``option`` on the script's command lines (comments left out)."""
    values = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or option not in line:
            continue
        words = shlex.split(line.replace("'", '"'), posix=True)
        values += [words[i + 1] for i, w in enumerate(words[:-1]) if w == option]
    return values


def test_the_queue_is_the_readme_status():
    """The list above is the one the speed README gives, in the same order."""
    text = open(os.path.join(SPEED, "README.md")).read()
    status = text[:text.index("\n## ")]   # the status: everything before the first section
    assert tuple(re.findall(r"^- `(call_\w+\.sh)`", status, flags=re.M)) == QUEUED


@pytest.mark.parametrize("script", QUEUED)
def test_queued_call_script_is_well_formed(script):
    path = os.path.join(SPEED, script)
    assert subprocess.run(["bash", "-n", path]).returncode == 0
    text = _expanded_text(path)
    for called in re.findall(r"(scripts/gpu/\w+\.py|tests/\S+\.py)", text):
        assert os.path.isfile(os.path.join(ROOT, called)), f"{script}: {called} does not exist"
    for families in _option_values(text, "--families"):
        assert set(families.split(",")) <= set(DELTA_RULE), f"{script}: --families {families}"
    for specs in _option_values(text, "--specs"):
        for spec in specs.split(","):
            parse_state_spec(spec)
    variants = _option_values(text, "--variants")
    for sets in variants:
        for knobs in sets.split(";"):
            LaunchKnobs(**parse_knobs(knobs))
    for knobs in _option_values(text, "--knobs"):   # (profile_step.py: one knob set)
        LaunchKnobs(**parse_knobs(knobs))
    if "launch_sweep.py" in text or "knob_identity_check.py" in text:
        assert variants or "--variants" not in text
