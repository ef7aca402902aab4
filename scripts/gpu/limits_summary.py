"""Summarise Nsight Compute readings (CPU): one line per profiled kernel launch of ``ncu --page raw --csv`` exports.

For each ``*_raw.csv`` in ``DIR`` (``ncu -i REPORT --page raw --csv``, one row per profiled launch, a units row
after the header): duration, DRAM bytes read / written and the achieved DRAM GB/s, DRAM and SM throughput as % of
peak, registers per thread, theoretical and achieved occupancy, issue-slot use, a warp's cycles per issued
instruction and instructions (the launch's warp instructions over its warps) and the three largest warp stall
reasons (cycles per issued instruction). Columns a report lacks stay empty. Writes ``DIR/ncu_summary.md`` / ``.csv``.

    python3 scripts/gpu/limits_summary.py DIR
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import re
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
from replayssm_quant.kernels.bench_report import markdown_table  # noqa: E402

#: summary column -> the ncu metric it reads (raw page names)
METRICS = {
    "us": "gpu__time_duration.sum",
    "dram_read_MB": "dram__bytes_read.sum",
    "dram_write_MB": "dram__bytes_write.sum",
    "dram_pct_peak": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct_peak": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "regs_per_thread": "launch__registers_per_thread",
    "occ_theoretical_pct": "sm__maximum_warps_per_active_cycle_pct",
    "occ_achieved_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "cycles_per_issue": "smsp__average_warp_latency_per_inst_issued.ratio",
}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: bytes / time units of the raw page -> the summary's MB and microseconds
SCALE = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "nsecond": 1e-3, "usecond": 1.0,
         "msecond": 1e3, "second": 1e6,
         "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}   # (ncu 2025's raw page writes "ns" with --print-units base)


def read_raw(path: str) -> pd.DataFrame:
    """An ncu raw CSV export -> DataFrame with the units row removed and values numeric where they parse; the
    units in ``.attrs["units"]``."""
    with open(path, errors="replace") as f:
        lines = f.readlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:   # (ncu failed: its messages, no table)
        return pd.DataFrame()
    df = pd.read_csv(io.StringIO("".join(lines[start:])), dtype=str, on_bad_lines="skip")
    units = {}
    if len(df) and str(df.iloc[0].get("ID", "")).strip() in ("", "nan"):
        units = df.iloc[0].to_dict()
        df = df.iloc[1:].reset_index(drop=True)
    for c in df.columns:
        v = pd.to_numeric(df[c].str.replace(",", ""), errors="coerce")
        if v.notna().any() and c not in ("Kernel Name",):
            df[c] = v
    df.attrs["units"] = units
    return df


def summarise(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """The summary rows of one raw export (:data:`METRICS`, the top stall reasons)."""
    units = df.attrs.get("units", {})
    rows = []
    for i, r in df.iterrows():
        row = {"source": source, "launch": i, "kernel": r.get("Kernel Name", "?"),
               "grid": r.get("Grid Size", ""), "block": r.get("Block Size", "")}
        for col, m in METRICS.items():
            val = r.get(m, float("nan"))
            if col.endswith("_MB") or col == "us":
                val = val * SCALE.get(str(units.get(m, "")).strip(), float("nan")) if m in r else float("nan")
            row[col] = val
        # a warp's instruction chain: the launch's warp instructions over its warps (the chain length that, times
        # the cycles per issue, a latency-bound launch takes)
        warps = r.get("launch__grid_size", float("nan")) * r.get("launch__block_size", float("nan")) / 32
        inst = r.get("inst_executed", float("nan"))
        row["inst_per_warp"] = inst / warps if warps == warps and warps else float("nan")
        if row["us"] == row["us"] and row["us"] > 0:
            row["dram_GBps"] = (row["dram_read_MB"] + row["dram_write_MB"]) * 1e6 / (row["us"] * 1e-6) / 1e9
        stalls = sorted(((float(r[c]), STALL.match(c).group(1)) for c in df.columns
                         if STALL.match(c) and pd.notna(r[c])), reverse=True)
        row["top_stalls"] = ", ".join(f"{n} {v:.1f}" for v, n in stalls[:3])
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="a folder of ncu raw exports (*_raw.csv: ncu -i R --page raw --csv --print-units base)")
    a = p.parse_args(argv)
    if not os.path.isdir(a.dir):
        p.error(f"{a.dir}: no such folder")
    parts = []
    for f in sorted(glob.glob(os.path.join(a.dir, "*_raw.csv"))):
        part = summarise(read_raw(f), os.path.basename(f)[:-len("_raw.csv")])
        if len(part):
            parts.append(part)
        else:   # e.g. an ncu failure message in place of the export
            print(f"limits_summary: {f} holds no profiled launch; left out", file=sys.stderr)
    if not parts:
        print(f"no *_raw.csv with a profiled launch in {a.dir}")
        return 1
    out = pd.concat(parts, ignore_index=True)
    out.to_csv(os.path.join(a.dir, "ncu_summary.csv"), index=False)
    table = markdown_table(out, ".3g")
    with open(os.path.join(a.dir, "ncu_summary.md"), "w") as f:
        f.write("# Nsight Compute readings (one row per profiled launch)\n\n" + table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
