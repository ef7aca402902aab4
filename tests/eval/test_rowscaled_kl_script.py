"""scripts/gpu/rowscaled_kl.py on CPU at tiny size: model with long-memory GDN heads, eval, report."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "rowscaled_kl.py"


def test_small_run_writes_the_side_by_side_report(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--small", "--out", str(tmp_path), "--tokens", "17",
                        "--prefill", "8", "--docs", "1", "--specs", "nvfp4+sr,nvfp4/fp8+sr,nvfp4/int8+sr"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = (tmp_path / "report.md").read_text()
    assert "| nvfp4/fp8+sr |" in rep and "| nvfp4/int8+sr |" in rep and "| nvfp4+sr |" in rep
    assert "nvfp4+sr / nvfp4/fp8+sr = **" in rep and "median 0.999" in rep     # decays near 0.9993
    assert (tmp_path / "kl" / "buckets.csv").is_file()


def test_bad_spec_fails_before_any_work(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--small", "--out", str(tmp_path / "o"), "--specs",
                        "fp16/bf16"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "at least as precise" in r.stderr and not (tmp_path / "o").exists()
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
