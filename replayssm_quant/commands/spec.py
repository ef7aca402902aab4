"""``replayssm-quant spec [MODE[@L]:]SPEC``: explain a state spec (with an optional decode-mode prefix, as ``eval``)."""

HELP = "parse a state spec (e.g. nvfp4/fp8+sr, conventional:fp8+sr, replay@8:nvfp4+sr) and print what it means"


def configure(parser):
    parser.add_argument("spec", help="state spec [MODE[@L]:]SPEC, e.g. fp32, fp8+sr, nvfp4/fp16, nvfp4/int8+sr, "
                                     "conventional:fp8+sr, replay@8:nvfp4+sr (a prefix overrides --mode/--window)")
    parser.add_argument("--mode", default="replay", choices=["replay", "conventional"],
                        help="decode mode (default: replay)")
    parser.add_argument("--window", type=int, default=16, help="replay window L (default 16)")
    parser.add_argument("--head-k", type=int, default=128,
                        help="state row length K (key / state dim) for the fp8 / int8 row scales (default 128)")


def _format_line(fmt, head_k: int, rounding: str) -> str:
    text = f"{fmt.name} ({rounding}"
    if fmt.row_scaled:
        text += f"; one fp32 scale per state row: {fmt.bits_at(head_k):.4g} bits/elem at K={head_k}"
    elif fmt.name in ("e4m3", "e5m2"):
        text += "; raw cast, no scale"
    return text + ")"


def describe(spec, mode="replay", window=16, head_k=128) -> dict:
    """What a spec means, as an ordered dict of label -> value."""
    ref = 8.0  # conventional fp32: read 4 + write 4 bytes per element per step
    step = spec.step_bytes_per_element(mode, window, head_k)
    return {
        "spec": spec.text,
        "layout": "shared (one checkpoint)" if spec.shared else "separate (Algorithm 3: dual checkpoint)",
        "read format": _format_line(spec.read, head_k, "round to nearest even" if not spec.shared else
                                    "the recurrence checkpoint, " + ("stochastic rounding" if spec.sr else
                                                                     "round to nearest even")),
        "recurrence format": _format_line(spec.recur, head_k,
                                          "stochastic rounding" if spec.sr else "round to nearest even"),
        "decode mode": mode + (f" (window L={window})" if mode == "replay" else " (state rounded every step)"),
        "checkpoint bytes per state element": f"{spec.state_bytes_per_element(head_k):.4g}",
        "state bytes per element per step": f"{step:.4g}",
        "vs conventional fp32 (8 B/elem/step)": f"{ref / step:.3g}x fewer bytes",
    }


def run(args):
    from replayssm_quant.eval.decode import parse_variant

    if args.window < 1:
        raise ValueError(f"--window must be >= 1, got {args.window}")
    if args.head_k < 1:
        raise ValueError(f"--head-k must be >= 1, got {args.head_k}")
    v = parse_variant(args.spec, default_mode=args.mode)
    info = describe(v.spec, v.mode, v.window or args.window, args.head_k)
    width = max(map(len, info))
    for k, val in info.items():
        print(f"{k:<{width}}  {val}")
    return 0
