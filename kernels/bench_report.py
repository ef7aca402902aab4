"""The benchmark's report: markdown tables, the targets, the ratios, ``report.md`` and ``bench.png``."""

from __future__ import annotations

import datetime
import math
import os
import platform
import sys

import torch

from .state_cache import SSMStateCache

#: the mode column of the anchors' rows (written by :mod:`.bench`): fla's fused recurrent kernel (gdn, kda) and
#: mamba_ssm's ``selective_state_update`` (mamba2)
FLA_MODE = "fla fused_recurrent"
MAMBA_SSM_MODE = "mamba_ssm selective_state_update"

L2_BYTES = 60 * 2 ** 20   # the H200's L2 (the timed slot groups exceed 4x it)


def configs(specs):
    """(spec, mode) pairs: conventional for shared specs, replay for all."""
    from replayssm_quant.quant import parse_state_spec

    out = []
    for s in specs:
        if ":" in s:
            raise ValueError(f"bench --specs takes specs without a mode prefix, got {s!r}: every spec is timed in "
                             "replay mode, and shared specs in conventional mode too")
        sp = parse_state_spec(s)
        if sp.shared:
            out.append((sp.text, "conventional"))
        out.append((sp.text, "replay"))
    return out


def shape_key_heads(shape: dict, shared_keys: bool = True) -> int | None:
    """``SSMStateCache``'s ``num_key_heads`` for a bench ``shape``: the model's key heads with ``shared_keys``, else
    None (a key per value head)."""
    return shape.get("num_key_heads") if shared_keys else None


def shape_key_group(shape: dict) -> int:
    """Value heads per key head of a bench ``shape`` (1: a key per head)."""
    return shape["num_heads"] // shape.get("num_key_heads", shape["num_heads"])


def memory_table(specs, shapes, window, ring_dtype=torch.float32, shared_keys=True):
    rows = []
    for fam, shape in shapes.items():
        for spec, mode in configs(specs):
            c = SSMStateCache(fam, spec, 1, shape["num_heads"], shape["head_k"], shape["head_v"],
                              window=window, mode=mode, backend="torch", ring_dtype=ring_dtype,
                              num_key_heads=shape_key_heads(shape, shared_keys))
            ck = c.hp.bytes_per_slot() + (0 if c.spec.shared else c.lp.bytes_per_slot())
            rows.append(dict(family=fam, spec=c.spec.text, mode=mode, checkpoint_bytes=ck,
                             ring_bytes=c.bytes_per_slot() - ck, total_bytes=c.bytes_per_slot(),
                             total_MiB=c.bytes_per_slot() / 2 ** 20))
    return rows


def _versions():
    v = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        import fla
        v["fla"] = getattr(fla, "__version__", "?")
    except Exception:
        v["fla"] = "not importable"
    return v


def run_header(device) -> list[str]:
    """Markdown lines naming how a GPU result was produced: command, UTC date, device, package versions."""
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [f"- command: `{' '.join(sys.argv)}`", f"- date: {date}", f"- device: {dev}",
            f"- versions: {', '.join(f'{k} {v}' for k, v in _versions().items())}"]


def write_table(out, stem, title, frame, device, columns=None, floatfmt=".1f") -> str:
    """Write ``frame`` to ``out/stem.csv`` and its ``columns`` (default all) to ``out/stem.md`` (title,
    :func:`run_header`, the table); returns the markdown table (scripts print it)."""
    frame.to_csv(os.path.join(out, f"{stem}.csv"), index=False)
    table = markdown_table(frame[columns] if columns else frame, floatfmt)
    # the text before the file is opened: the header's imports can be slow, and a run cut there left an empty file
    text = "\n".join([f"# {title}", "", *run_header(device), "", table, ""])
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(text)
    return table


def _targets(df):
    """Lines checking the issue's H200 targets against the measured table, for the replay times with the
    slots' flushes on one step (``time_us``) and spread over the L steps (``staggered_us``)."""
    lines = []
    phases = (("aligned flushes", "time_us", "frac_copy_bw"),
              ("staggered flushes", "staggered_us", "staggered_frac_copy_bw"))
    for fam in sorted(df.family.unique()):
        d = df[df.family == fam]

        def t(spec, mode, b, col="time_us"):
            r = d[(d.spec == spec) & (d["mode"] == mode) & (d.batch == b)]
            return float(r[col].iloc[0]) if len(r) else float("nan")

        for b in sorted(d.batch.unique()):
            if b < 256:
                continue
            conv = t("fp32", "conventional", b)
            for name, col, _ in phases:
                lines.append(f"- {fam} B={b}, {name}: replay fp32 speedup over conventional fp32 = "
                             f"{conv / t('fp32', 'replay', b, col):.2f}x (target >= 1.7x); "
                             f"nvfp4/fp16 = {conv / t('nvfp4/fp16', 'replay', b, col):.2f}x (target >= 6x)"
                             + (f"; replay fp32 over fla = {t('fla fp32', FLA_MODE, b) / t('fp32', 'replay', b, col):.2f}x "
                                "(target >= 1.6x)" if fam in ("gdn", "kda") else "")
                             + (f"; nvfp4/fp16 over mamba_ssm = {t('mamba_ssm fp32', MAMBA_SSM_MODE, b) / t('nvfp4/fp16', 'replay', b, col):.2f}x "
                                "(issue 28: >= 4x)" if fam == "mamba2" else ""))
        if 1 in set(d.batch):
            lines.append(f"- {fam} B=1: replay fp32 / conventional fp32 time = "
                         f"{t('fp32', 'replay', 1) / t('fp32', 'conventional', 1):.2f} (target <= 1.1)")
    big = df[(df.batch >= 256) & ~df["mode"].isin([FLA_MODE, MAMBA_SSM_MODE])]
    for _, r in big.iterrows():
        need = 0.90 if r.spec == "fp32" else 0.75
        for name, _, col in phases if r["mode"] == "replay" else phases[:1]:
            if r[col] < need:
                lines.append(f"- below bandwidth target: {r.family} {r.spec} {r['mode']} B={r.batch}"
                             f"{', ' + name if r['mode'] == 'replay' else ''}: {100 * r[col]:.0f}% of copy "
                             f"bandwidth (target {100 * need:.0f}%)")
    return lines


def markdown_table(frame, floatfmt: str = ".3g") -> str:
    """A pandas DataFrame as a GitHub markdown table (no tabulate dependency)."""
    def cell(x):
        if isinstance(x, float):
            return "" if math.isnan(x) else format(x, floatfmt)
        return str(x)
    cols = [str(c) for c in frame.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        out.append("| " + " | ".join(cell(x) for x in row) + " |")
    return "\n".join(out)


def add_ratios(df) -> None:
    """Add to a results frame (in place): ``frac_copy_bw`` (min_bytes per ``time_us``, over copy_GBps),
    ``speedup_vs_conv_fp32``, ``speedup_vs_fla`` (gdn, kda: fla's kernel of the family) and
    ``speedup_vs_mamba_ssm`` (mamba2: mamba_ssm's ``selective_state_update``) from ``time_us``, and the same from ``staggered_us``
    (rings at spread positions, :func:`stagger_slots`): ``staggered_frac_copy_bw``,
    ``staggered_speedup_vs_conv_fp32``, ``staggered_speedup_vs_fla``. The references (conventional fp32, fla)
    have no ring phase: their own time."""
    if "staggered_us" not in df:       # (a resumed partial file of an older bench)
        df["staggered_us"] = float("nan")
    conv = df[(df.spec == "fp32") & (df["mode"] == "conventional")].set_index(["family", "batch"]).time_us
    flat = df[df["mode"] == FLA_MODE].set_index(["family", "batch"]).time_us
    mssm = df[df["mode"] == MAMBA_SSM_MODE].set_index(["family", "batch"]).time_us
    for pre, col in (("", "time_us"), ("staggered_", "staggered_us")):
        df[f"{pre}frac_copy_bw"] = df.min_bytes / (df[col] * 1e-6) / 1e9 / df.copy_GBps
        df[f"{pre}speedup_vs_conv_fp32"] = [conv.get((f, b), float("nan")) / t for f, b, t in
                                            zip(df.family, df.batch, df[col])]
        df[f"{pre}speedup_vs_fla"] = [flat.get((f, b), float("nan")) / t
                                      for f, b, t in zip(df.family, df.batch, df[col])]
        df[f"{pre}speedup_vs_mamba_ssm"] = [mssm.get((f, b), float("nan")) / t
                                            for f, b, t in zip(df.family, df.batch, df[col])]


def _plot(path, df, fams, meta) -> None:
    """``bench.png``: time per step over batch, one column per family; row 0 replay with aligned flushes
    (``time_us``), row 1 staggered flushes (``staggered_us``; conventional and fla rows have no ring phase: the
    same times in both rows)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # row 0: replay with aligned flushes (time_us); row 1: staggered flushes (staggered_us; conventional and
    # fla rows have no ring phase: the same times in both rows)
    fig, axes = plt.subplots(2, len(fams), figsize=(6 * len(fams), 9.5), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for row, (col, phase) in enumerate((("time_us", "aligned flushes"),
                                        ("staggered_us", "staggered flushes (B / L rows flush per step)"))):
        for ax, fam in zip(axes[row], fams):
            d = df[df.family == fam]
            for i, ((spec, mode), g) in enumerate(d.groupby(["spec", "mode"], sort=False)):
                g = g.sort_values("batch")
                ax.plot(g.batch, g[col], marker="o", ls="--" if mode == "conventional" else "-",
                        color=colors[i % len(colors)], label=f"{spec} {mode}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch (sequences)")
            ax.set_ylabel("time per decode step (us)")
            ax.set_title(f"{fam}: {meta['shapes'][fam]['note']}\nreplay with {phase}", fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out, df, mem, corr, meta, notes):
    """Write ``results.csv``, ``memory.csv``, ``correctness.csv``, ``bench.png`` and ``report.md`` under ``out``."""
    import pandas as pd

    os.makedirs(out, exist_ok=True)
    df.to_csv(os.path.join(out, "results.csv"), index=False)
    mdf = pd.DataFrame(mem)
    mdf.to_csv(os.path.join(out, "memory.csv"), index=False)
    cdf = pd.DataFrame(corr)
    cdf.to_csv(os.path.join(out, "correctness.csv"), index=False)

    fams = list(dict.fromkeys(df.family))
    _plot(os.path.join(out, "bench.png"), df, fams, meta)

    md = markdown_table

    smoke = meta["device"].startswith("cpu")
    lines = ["# Decode-kernel benchmark" + (" (CPU smoke run)" if smoke else ""), "",
             f"- command: `{meta['command']}`", f"- date: {meta['date']}", f"- device: {meta['device']}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}"]
    if smoke:
        sizes = ", ".join(f"{f} HV={d['num_heads']} K={d['head_k']} V={d['head_v']}" for f, d in meta["shapes"].items())
        lines += [f"- a CPU smoke run: tiny shapes ({sizes}), window L = {meta['window']}, "
                  "every kernel run in the Triton interpreter: it checks that the pipeline runs and that the kernels "
                  "agree with the float64 oracle; the times are wall times of one interpreted call each and say "
                  "nothing about a GPU (no CUDA graphs, no L2 rotation, no copy-bandwidth reference, no targets)", ""]
    else:
        lines += [
             f"- window L = {meta['window']}; per-step time = median of triton.testing.do_bench over CUDA-graph "
             f"replays of L rounds x R slot groups (R chosen so the groups' checkpoints exceed 4x the "
             f"{L2_BYTES >> 20} MB L2), divided by L*R; activations bf16; the replay rings keep k and v in "
             f"{meta['ring_dtype']} (`ring_dtype`; betas, cumulative log decays and corrections in float32); "
             + ("one ring key per key head where the model's value heads share keys (`--keys shared`)"
                if meta.get("shared_keys", True) else "one ring key per value head (`--keys per-head`)"),
             f"- device copy bandwidth (read + write, 1 GiB buffers, do_bench median, no CUDA graph): "
             f"{meta['copy_GBps']:.0f} GB/s (copy_ {meta['copy_detail']['copy']:.0f}, elementwise "
             f"{meta['copy_detail']['elementwise']:.0f})",
             "- minimum bytes = state bytes per step only (conventional 2R, replay R(1+1/L), dual W + 2R/L "
             "bytes per element); ring and activation traffic is extra", ""]
    for n in notes:
        lines.append(f"- note: {n}")
    if not smoke:
        lines += ["", "## Targets", ""] + (_targets(df) or ["- (no batch >= 256 rows)"])
    lines += ["", "## Correctness " + ("in the interpreter" if smoke else "on the device") + " (float64 oracle)", "",
              md(cdf, ".2e"), ""]
    lines += ["## Time per step (us)", ""]
    lines += ["Replay rows: aligned flushes (every slot of a group at the same ring position, so the group "
              "flushes on one of the L steps; the plot's top row), then staggered flushes (ring positions spread, "
              "B / L rows flush on every step, as in serving; the bottom row). Conventional and fla rows have no "
              "ring.", ""]
    for fam in fams:
        d = df[df.family == fam]
        # (rows in run order, batches ascending: a resumed run appends its batches after the earlier ones)
        piv = d.pivot_table(index=["spec", "mode"], columns="batch", values="time_us", sort=False)
        piv = piv.sort_index(axis=1)
        lines += [f"### {fam} ({meta['shapes'][fam]['note']})", "", md(piv.reset_index(), ".1f"), ""]
        r = d[d["mode"] == "replay"]
        if r.staggered_us.notna().any():
            piv = r.pivot_table(index=["spec", "mode"], columns="batch", values="staggered_us", sort=False)
            piv = piv.sort_index(axis=1)
            lines += [f"staggered flushes, {fam} replay:", "", md(piv.reset_index(), ".1f"), ""]
    lines += ["## All measurements", "",
              md(df[["family", "spec", "mode", "batch", "time_us", "staggered_us", "nonflush_us", "flush_us",
                     "min_bytes", "GBps", "frac_copy_bw", "staggered_frac_copy_bw",
                     "speedup_vs_conv_fp32", "staggered_speedup_vs_conv_fp32", "speedup_vs_fla",
                     "staggered_speedup_vs_fla", "speedup_vs_mamba_ssm", "rotation", "block_v", "flush_block_v", "num_warps",
                     "maxnreg", "split_flush", "prefetch"]]), "",
              "## Memory per sequence slot per layer (checkpoints + ring, L = "
              f"{meta['window']}; the ring's k and v in {meta['ring_dtype']})", "", md(mdf, ".4g"), "",
              "![time per step](bench.png)", ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))
