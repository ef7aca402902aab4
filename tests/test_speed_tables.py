"""reports/bench/speed/make_tables.py: the goal tables of a bench folder, reproduced from the committed table, and
goal 3 of a run without its anchor rows (fla or mamba_ssm not importable) judged on our conventional kernel."""

import os
import shutil
import subprocess
import sys

import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEED = os.path.join(ROOT, "reports", "bench", "speed")


def _tables(folder) -> str:
    r = subprocess.run([sys.executable, os.path.join(SPEED, "make_tables.py"), str(folder)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_make_tables_reproduces_the_committed_table():
    with open(os.path.join(SPEED, "bench_h100", "tables.md")) as f:
        assert _tables(os.path.join(SPEED, "bench_h100")) == f.read()


def test_goal_3_without_anchor_rows(tmp_path):
    for name in ("results.csv", "title.txt", "correctness.csv"):
        shutil.copy(os.path.join(SPEED, "bench_h100", name), tmp_path)
    df = pd.read_csv(tmp_path / "results.csv")
    df[df["mode"].isin(("replay", "conventional"))].to_csv(tmp_path / "results.csv", index=False)
    goal3 = _tables(tmp_path).split("Goal 3")[1].split("Goal 4")[0]
    assert "nan" not in goal3
    b1 = df[(df.family == "gdn") & (df.spec == "fp32") & (df.batch == 1)].set_index("mode").time_us
    conv, rep = b1["conventional"], b1["replay"]   # (the committed table's own rows: not tied to one run's numbers)
    assert (f"- gdn: best conventional = ours conventional {conv:.3f} (target <= {1.3 * conv:.3f}); "
            f"replay fp32 {rep:.3f} = {rep / conv:.3f}x") in goal3
