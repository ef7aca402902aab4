"""The nvfp4 pass-1 item layouts at B = 64 staggered, from the launch sweeps of calls s10b (gdn) and s10c (kda);
writes ``items.md`` next to this file. Rerun from the repository root (CPU, pandas):

    python reports/bench/speed/nvfp4_items/make_table.py

Layouts (knob ``flush_nvfp4_item_blocks``): "default" = the number of sub-blocks per item decided on the device per
step (the fewest that keep the items within one wave; at B = 64 staggered 2 of the head's 8, in a runtime loop);
1, 2, 4 = fixed, unrolled (1 is the item of the code before this change, one 16-row sub-block). Each ratio is the
layout's staggered time over fixed 1 of the same sweep. s10a's sweep (``b64_item_blocks_s10a.csv``, tree
``587e2d6``) ran an earlier version in which a fixed count was a runtime loop too: its "fixed 1" is not the previous
item (gdn nvfp4/fp16 91.9 us against 70.2 unrolled in s10b).
"""

from __future__ import annotations

import os

import pandas as pd

from replayssm_quant.kernels.bench_report import markdown_table

HERE = os.path.dirname(os.path.abspath(__file__))
SWEEPS = {"s10b": "b64_item_blocks_s10b.csv", "s10c": "b64_item_blocks_kda_s10c.csv"}
#: each call's sweep command (part of ``reports/bench/speed/call_CALL.sh``) and its machine record (UTC start, GPU,
#: driver, versions, tree)
COMMANDS = {
    "s10b": "python3 scripts/gpu/launch_sweep.py --out $R/items --families gdn,kda --specs nvfp4/fp16,nvfp4/fp8+sr "
            "--batch 64 --phases staggered --rep-ms 10 --stem b64_item_blocks --variants \"default;"
            "flush_nvfp4_item_blocks=1;flush_nvfp4_item_blocks=2;flush_nvfp4_item_blocks=4\"",
    "s10c": "python3 scripts/gpu/launch_sweep.py --out $R/items --families kda --specs nvfp4/fp16,nvfp4/fp8+sr "
            "--batch 64 --phases staggered --rep-ms 10 --stem b64_item_blocks_kda --variants \"default;"
            "flush_nvfp4_item_blocks=1;flush_nvfp4_item_blocks=2\"",
}
NOTES = {"s10b": " (cut by its 200 s cap after gdn)", "s10c": ""}
MACHINES = {"s10b": "machine_s10b.txt", "s10c": "machine_s10c.txt"}


def main():
    rows = []
    for call, name in SWEEPS.items():
        d = pd.read_csv(os.path.join(HERE, name))
        for (fam, spec), g in d.groupby(["family", "spec"], sort=False):
            base = float(g[g.flush_nvfp4_item_blocks == 1].staggered_us.iloc[0])
            for _, r in g.iterrows():
                n = int(r.flush_nvfp4_item_blocks)
                rows.append({"call": call, "family": fam, "spec": spec,
                             "sub-blocks per item": "default (on the device)" if n == 0 else f"fixed {n}",
                             "staggered us": f"{r.staggered_us:.1f}", "vs fixed 1": f"{r.staggered_us / base:.3f}"})
    runs = []
    for call in SWEEPS:
        with open(os.path.join(HERE, MACHINES[call])) as f:
            machine = "; ".join(line.strip() for line in f if line.strip())
        runs.append(f"- {call} (`reports/bench/speed/call_{call}.sh`): `{COMMANDS[call]}`{NOTES[call]}; machine: {machine}")
    text = ("# nvfp4 pass-1 items at B = 64, staggered flushes (H200, `launch_sweep.py --phases staggered`)\n\n"
            + "\n".join(runs) + "\n\n" + markdown_table(pd.DataFrame(rows)) + "\n")
    with open(os.path.join(HERE, "items.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
