"""The static A/Bs of the decode launches' compiled code (CPU): ``python reports/bench/speed/sass/make_table.py``
-> ``table.md`` (the flush loops, SR change) and ``nvfp4_decode.md`` (the nvfp4 decode change) from the
``scripts/ptxas_report.py`` CSVs beside it (README.md says which commands)."""

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
    decode_table()


def _program_instructions(r, suffix: str = "") -> int:
    """Instructions one non-flush program executes: the listing, with a staged chunk loop run once per key chunk
    (4 chunks at the bench shape, K = 128, 32-key chunks; an unrolled kernel has no loop: ``chunk_loop`` 0)."""
    return int(r["instr" + suffix] + 3 * r["chunk_loop" + suffix])


def decode_table():
    """``nvfp4_decode.md``: the non-flush launch (instructions per program, its chunk loop, registers) and the
    flush loops of the nvfp4 specs before and after the E4M3-image decode of the nvfp4 codes."""
    key = ["family", "spec"]
    nf = pd.read_csv(os.path.join(HERE, "nvfp4_decode_nonflush_after.csv")).merge(
        pd.read_csv(os.path.join(HERE, "nvfp4_decode_nonflush_before.csv")), on=key + ["knobs"], suffixes=("", "_b"))
    rows = []
    for _, r in nf.iterrows():
        b = _program_instructions(r, "_b")
        a = _program_instructions(r)
        rows.append({"family": r["family"], "spec": r["spec"],
                     "instructions per program before -> after": f"{b} -> {a} ({(a - b) / b:+.1%})",
                     "chunk loop before -> after": f"{int(r['chunk_loop_b'])} -> {int(r['chunk_loop'])}",
                     "registers before -> after": f"{int(r['regs_b'])} -> {int(r['regs'])}",
                     "programs per SM by registers": f"{int(r['programs_per_sm_by_regs_b'])} -> "
                                                     f"{int(r['programs_per_sm_by_regs'])}",
                     "spill bytes": f"{int(r['spill_store_B_b'])} -> {int(r['spill_store_B'])}"})
    fl = pd.read_csv(os.path.join(HERE, "nvfp4_decode_flush_after.csv")).merge(
        pd.read_csv(os.path.join(HERE, "nvfp4_decode_flush_before.csv")), on=key + ["dot"], suffixes=("", "_b"))
    frows = [{"family": r["family"], "spec": r["spec"], "flush dots": r["dot"],
              "innermost loops before": ";".join(map(str, _loops(r["inner_loops_b"]))),
              "after": ";".join(map(str, _loops(r["inner_loops"]))),
              "change": ";".join(f"{(y - x) / x:+.1%}" for x, y in zip(_loops(r["inner_loops_b"]),
                                                                      _loops(r["inner_loops"]))),
              "registers": int(r["regs"]), "spill bytes": f"{int(r['spill_store_B_b'])} -> {int(r['spill_store_B'])}"}
             for _, r in fl.iterrows()]
    text = ("# nvfp4 decode through the E4M3 image of the codes: compiled for sm_90a (B = 256, the H200 plan)\n\n"
            "## Non-flush launch (`_nonflush_kernel`), per program\n\n" + pd.DataFrame(rows).to_markdown(index=False)
            + "\n\n## Flush launch (`_flush_kernel`): innermost loops, instructions per warp and sub-block\n\n"
            + pd.DataFrame(frows).to_markdown(index=False) + "\n")
    with open(os.path.join(HERE, "nvfp4_decode.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
