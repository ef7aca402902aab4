"""``replayssm-quant spec STRING``: explain a state spec."""

HELP = "parse a state spec (e.g. nvfp4/fp8+sr) and print what it means"


def configure(parser):
    parser.add_argument("spec", help="state spec, e.g. fp32, fp8+sr, nvfp4/fp16, nvfp4/fp8+sr")
    parser.add_argument("--mode", default="replay", choices=["replay", "conventional"],
                        help="decode mode (default: replay)")
    parser.add_argument("--window", type=int, default=16, help="replay window L (default 16)")


def describe(spec, mode="replay", window=16) -> dict:
    """What a spec means, as an ordered dict of label -> value."""
    ref = 8.0  # conventional fp32: read 4 + write 4 bytes per element per step
    step = spec.step_bytes_per_element(mode, window)
    return {
        "spec": spec.text,
        "layout": "shared (one checkpoint)" if spec.shared else "separate (Algorithm 3: dual checkpoint)",
        "read format": spec.read.name + " (round to nearest even)",
        "recurrence format": spec.recur.name + (" (stochastic rounding)" if spec.sr else " (round to nearest even)"),
        "decode mode": mode + (f" (window L={window})" if mode == "replay" else " (state rounded every step)"),
        "checkpoint bytes per state element": f"{spec.state_bytes_per_element():.4g}",
        "state bytes per element per step": f"{step:.4g}",
        "vs conventional fp32 (8 B/elem/step)": f"{ref / step:.3g}x fewer bytes",
    }


def run(args):
    from replayssm_quant.quant.spec import parse_state_spec

    spec = parse_state_spec(args.spec)
    info = describe(spec, args.mode, args.window)
    width = max(map(len, info))
    for k, v in info.items():
        print(f"{k:<{width}}  {v}")
    return 0
