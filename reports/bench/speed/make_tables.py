"""Tables and goal numbers of issue 28 from one bench table's folder (``bench_h100/``: call s32a of
2026-12-07, the current kernels with shared keys on an H100; ``bench_h200/``: calls s15a + s15b of 2026-12-05,
tree ``de22e01``, the last table on an H200). Each folder holds the resumed run's ``results.csv``,
``correctness.csv`` and ``title.txt`` (the heading: calls, date, tree, card).

Rerun from the repository root (CPU only, the package importable):

    python reports/bench/speed/make_tables.py reports/bench/speed/bench_h100

It reads ``results.csv`` and ``correctness.csv`` in the folder, adds the bench's own ratio columns
(:func:`replayssm_quant.kernels.bench_report.add_ratios`: ``frac_copy_bw``, ``speedup_vs_conv_fp32``,
``speedup_vs_fla``, ``speedup_vs_mamba_ssm``, from the aligned time) and writes ``tables.md`` there:
one table per family (every row of the run, B = 1, 64, 256, 512) and the numbers each goal of issue 28 is judged by.
The bench's own report of the resumed run is ``bench_report.md`` (with ``bench.png``); this script lays the rows out
per family in the order of the issue and adds the goal numbers, with the bench's ratio and markdown helpers, not a
copy of them.
"""

from __future__ import annotations

import argparse
import math
import os

import pandas as pd

from replayssm_quant.kernels.bench_report import add_ratios, markdown_table

FAMILIES = ("gdn", "kda", "mamba2")
BATCHES = (1, 64, 256, 512)
ROW_ORDER = [("fla fp32", "fla fused_recurrent"), ("mamba_ssm fp32", "mamba_ssm selective_state_update"),
             ("fp32", "conventional"), ("fp32", "replay"), ("nvfp4/fp16", "replay"), ("nvfp4/fp8+sr", "replay"),
             ("fp8+sr", "conventional"), ("fp8+sr", "replay"), ("int8+sr", "conventional"), ("int8+sr", "replay")]
ANCHOR = {"gdn": ("fla fp32", "fla fused_recurrent"), "kda": ("fla fp32", "fla fused_recurrent"),
          "mamba2": ("mamba_ssm fp32", "mamba_ssm selective_state_update")}
MODE_SHORT = {"fla fused_recurrent": "fla", "mamba_ssm selective_state_update": "mamba_ssm"}


def g(x, fmt):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def load(folder):
    df = pd.read_csv(os.path.join(folder, "results.csv"))
    add_ratios(df)
    df["stag_over_aligned"] = df.staggered_us / df.time_us
    df.loc[df["mode"] != "replay", "stag_over_aligned"] = float("nan")
    return df


def family_table(df, fam) -> str:
    d = df[df.family == fam]
    rows = []
    for b in BATCHES:
        for spec, mode in ROW_ORDER:
            r = d[(d.spec == spec) & (d["mode"] == mode) & (d.batch == b)]
            if (spec, mode) in (ANCHOR["gdn"], ANCHOR["mamba2"]) and (spec, mode) != ANCHOR[fam]:
                continue
            if not len(r):
                rows.append(dict(B=b, spec=spec, mode=MODE_SHORT.get(mode, mode), aligned="missing"))
                continue
            r = r.iloc[0]
            rows.append({"B": b, "spec": spec, "mode": MODE_SHORT.get(mode, mode),
                         "aligned": g(r.time_us, ".4g"),
                         "staggered": g(r.staggered_us, ".4g") if mode == "replay" else "",
                         "stag/aligned": g(r.stag_over_aligned, ".3f"),
                         "non-flush": g(r.nonflush_us, ".4g"), "flush": g(r.flush_us, ".4g"),
                         "% of copy": g(100 * r.frac_copy_bw, ".1f"),
                         "vs conv fp32": g(r.speedup_vs_conv_fp32, ".2f"),
                         ("vs mamba_ssm" if fam == "mamba2" else "vs fla"):
                             g(r.speedup_vs_mamba_ssm if fam == "mamba2" else r.speedup_vs_fla, ".2f")})
    return markdown_table(pd.DataFrame(rows).fillna(""))


def goals(df) -> list[str]:
    def t(fam, spec, mode, b, col="time_us"):
        r = df[(df.family == fam) & (df.spec == spec) & (df["mode"] == mode) & (df.batch == b)]
        return float(r[col].iloc[0]) if len(r) else float("nan")

    out = ["## Goal numbers (aligned time unless said; us per step)", ""]
    out.append("Goal 1a, nvfp4/fp16 replay at B = 256 >= 4x the conventional fp32 anchor:")
    for fam in FAMILIES:
        a = t(fam, *ANCHOR[fam], 256)
        conv = t(fam, "fp32", "conventional", 256)
        nv = t(fam, "nvfp4/fp16", "replay", 256)
        out.append(f"- {fam}: anchor {ANCHOR[fam][1]} {a:.1f}, target <= {a / 4:.1f}; ours conventional fp32 "
                   f"{conv:.1f} (target <= {conv / 4:.1f}); nvfp4/fp16 {nv:.1f} = {a / nv:.2f}x anchor, "
                   f"{conv / nv:.2f}x ours; over the anchor target by {nv / (a / 4):.2f}x; non-flush "
                   f"{t(fam, 'nvfp4/fp16', 'replay', 256, 'nonflush_us'):.1f} (x15/16 = "
                   f"{15 / 16 * t(fam, 'nvfp4/fp16', 'replay', 256, 'nonflush_us'):.1f}), flush "
                   f"{t(fam, 'nvfp4/fp16', 'replay', 256, 'flush_us'):.0f} (/16 = "
                   f"{t(fam, 'nvfp4/fp16', 'replay', 256, 'flush_us') / 16:.1f})")
    out += ["", "Goal 1b, staggered / aligned > 1.10 (replay rows; all others are <= 1.10):"]
    r = df[(df["mode"] == "replay")].sort_values(["family", "batch", "spec"])
    worst = r.groupby("batch").stag_over_aligned.max()
    for _, x in r[r.stag_over_aligned > 1.10].iterrows():
        out.append(f"- {x.family} {x.spec} B={x.batch}: {x.staggered_us:.4g} / {x.time_us:.4g} = "
                   f"{x.stag_over_aligned:.3f}")
    out.append("- the largest ratio per batch: " + ", ".join(f"B={b}: {v:.3f}" for b, v in worst.items()))
    for b in BATCHES:
        ok = r[(r.batch == b) & (r.stag_over_aligned <= 1.10)]
        out.append(f"- B={b}: {len(ok)} of {len(r[r.batch == b])} replay rows within 10%")
    out += ["", "Goal 2, replay fp32 at B = 256 (gdn < 160.5, mamba2 <= 310):"]
    for fam in FAMILIES:
        rp = t(fam, "fp32", "replay", 256)
        out.append(f"- {fam}: {rp:.1f} (non-flush {t(fam, 'fp32', 'replay', 256, 'nonflush_us'):.1f}, flush "
                   f"{t(fam, 'fp32', 'replay', 256, 'flush_us'):.0f}); {t(fam, *ANCHOR[fam], 256) / rp:.2f}x the "
                   f"anchor, {t(fam, 'fp32', 'conventional', 256) / rp:.2f}x conventional fp32")
    out += ["", "Goal 3, batch 1, replay fp32 <= 1.3x the best conventional fp32 kernel of the run:"]
    for fam in FAMILIES:
        cands = {ANCHOR[fam][1]: t(fam, *ANCHOR[fam], 1), "ours conventional": t(fam, "fp32", "conventional", 1)}
        timed = {k: v for k, v in cands.items() if not math.isnan(v)}   # (a run without its anchor has no row)
        best = min(timed, key=timed.get) if timed else "ours conventional"
        rp = t(fam, "fp32", "replay", 1)
        out.append(f"- {fam}: best conventional = {best} {cands[best]:.3f} (target <= {1.3 * cands[best]:.3f}); "
                   f"replay fp32 {rp:.3f} = {rp / cands[best]:.3f}x; ours conventional "
                   f"{cands['ours conventional']:.3f}")
    out += ["", "Goal 4, 8-bit replay at B = 256 >= 3x conventional fp32:"]
    for fam in FAMILIES:
        conv = t(fam, "fp32", "conventional", 256)
        parts = []
        for s in ("fp8+sr", "int8+sr"):
            x = t(fam, s, "replay", 256)
            parts.append(f"{s} {x:.1f} = {conv / x:.2f}x (non-flush {t(fam, s, 'replay', 256, 'nonflush_us'):.1f}, "
                         f"flush {t(fam, s, 'replay', 256, 'flush_us'):.0f})")
        out.append(f"- {fam}: conventional fp32 {conv:.1f}, target <= {conv / 3:.1f}; " + "; ".join(parts))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description="issue 28's per-family tables and goal numbers of one bench folder")
    parser.add_argument("folder", help="a folder with results.csv, correctness.csv and title.txt")
    folder = parser.parse_args(argv).folder
    for name in ("results.csv", "correctness.csv", "title.txt"):
        if not os.path.isfile(os.path.join(folder, name)):
            parser.error(f"{folder} has no {name}: give a bench table's folder (e.g. reports/bench/speed/bench_h100)")
    df = load(folder)
    corr = pd.read_csv(os.path.join(folder, "correctness.csv"))
    with open(os.path.join(folder, "title.txt")) as f:
        title = f.read().strip()
    lines = [f"# Issue 28 bench ({title})", "",
             f"Generated by `make_tables.py` from `results.csv` ({len(df)} rows) and `correctness.csv` "
             f"({int(corr.ok.sum())} of {len(corr)} device checks ok). Copy bandwidth per call: "
             + ", ".join(f"{v:.0f} GB/s ({n} rows)" for v, n in df.copy_GBps.value_counts(sort=False).items())
             + ". Times in us per step; \"% of copy\" from the aligned time and the row's own call's bandwidth;",
             "\"vs\" columns: the reference's time over this row's aligned time (same family, batch, run).", ""]
    for fam in FAMILIES:
        lines += [f"## {fam}", "", family_table(df, fam), ""]
    lines += goals(df)
    with open(os.path.join(folder, "tables.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
