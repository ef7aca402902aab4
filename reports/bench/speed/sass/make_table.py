"""The static A/B of the flush launch's compiled loops (CPU): ``python reports/bench/speed/sass/make_table.py``
-> ``table.md`` from the ``scripts/ptxas_report.py --flush`` CSVs beside it (README.md says which commands)."""

import os

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = ["family", "spec", "dot"]


def _loops(s) -> list[int]:
    return [int(x) for x in str(s).split(";") if int(x) > 1]   # (1-instruction loops: the launch's idle spin)


def main():
    before = pd.read_csv(os.path.join(HERE, "before_0fff0c1.csv"))
    after = pd.concat([pd.read_csv(os.path.join(HERE, f)) for f in ("after_947b24e.csv", "after_947b24e_tf32x3.csv")])
    m = after.merge(before, on=KEY, how="left", suffixes=("", "_before"))
    rows = []
    for _, r in m.iterrows():
        b = _loops(r["inner_loops_before"]) if isinstance(r["inner_loops_before"], str) else []
        a = _loops(r["inner_loops"])
        rows.append({
            "family": r["family"], "spec": r["spec"], "flush dots": r["dot"],
            "innermost loops before (instructions per warp and sub-block)": ";".join(map(str, b)) or "-",
            "after": ";".join(map(str, a)),
            "change": ";".join(f"{(y - x) / x:+.1%}" for x, y in zip(b, a)) or "-",
            "registers": int(r["regs"]),
            "spill bytes stored before -> after": (f"{int(r['spill_store_B_before'])} -> " if b else "- -> ")
            + str(int(r["spill_store_B"])),
        })
    df = pd.DataFrame(rows)
    text = ("# Flush launch, compiled for sm_90a (B = 256, the H200 plan, launch arguments specialized as the JIT "
            "does): innermost loops at commit 0fff0c1 and with the SR path of 947b24e\n\n"
            + df.to_markdown(index=False) + "\n")
    with open(os.path.join(HERE, "table.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
