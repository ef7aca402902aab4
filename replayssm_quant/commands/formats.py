"""``replayssm-quant formats``: the table of storage formats."""

HELP = "print a table of every state format (bits, range, epsilon, block size)"


def configure(parser):
    parser.add_argument("--csv", action="store_true", help="print CSV instead of a text table")


def formats_table():
    """One row per format in :data:`replayssm_quant.quant.formats.FORMATS` (a pandas DataFrame)."""
    import pandas as pd

    from replayssm_quant.quant.formats import DEFAULT_ROW_LEN, FORMATS

    rows = []
    for f in FORMATS.values():
        scale = "-"
        if f.row_scaled:
            scale = f"fp32 per row: 8 + {f.row_scale_bits}/K"
        elif f.block_size:
            scale = f"E4M3 per {f.block_size} + fp32 per head"
        rows.append({
            "format": f.name,
            f"bits/elem (with scales, K={DEFAULT_ROW_LEN})": f.bits_at(DEFAULT_ROW_LEN),
            "scale": scale,
            "exp bits": f.exp_bits,
            "man bits": f.man_bits,
            "max finite": f.max_finite,
            "min normal": f.min_normal,
            "min subnormal": f.min_subnormal,
            "epsilon": f.eps,
            "block size": f.block_size or "-",
            "nan": "yes" if f.has_nan else "no (see docs)",
        })
    return pd.DataFrame(rows)


def run(args):
    df = formats_table()
    if args.csv:
        print(df.to_csv(index=False), end="")
    else:
        print(df.to_string(index=False))
        print("\nnvfp4: E2M1 elements {0,.5,1,1.5,2,3,4,6}, one E4M3 scale per 16 elements along the "
              "key dim, one fp32 scale per (slot, head); max finite = 6 x 448 x (amax / 2688).")
        print("fp8: E4M3FN codes x one fp32 decode scale d = amax(row) / 448 per state row (the key / state dim K);"
              " int8: codes -127..127 x d = amax(row) / 127; ranges are those of the codes (value = code x d).")
        print("e4m3, e5m2: raw casts of the state, no scale (e4m3 is what fp8 meant before the row scale).")
    return 0
