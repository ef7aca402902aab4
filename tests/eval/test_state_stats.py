"""state-stats: per-format cast error of real prefilled states."""

import torch

from replayssm_quant.eval.adapters.loading import load_model
from replayssm_quant.eval.state_stats import (FORMATS_COMPARED, markdown, prefill_states, state_format_table,
                                              summary)


def test_table_on_a_tiny_model_has_a_row_per_layer_and_format():
    lm = load_model("tiny-qwen3_5")
    ids = torch.randint(0, 256, (2, 24))
    states = prefill_states(lm.model, ids)
    assert states and all(s.dtype == torch.float32 and s.dim() == 4 and s.shape[0] == 2 for s in states.values())
    table = state_format_table(states)
    assert len(table) == len(states) * len(FORMATS_COMPARED)
    mean = summary(table)["rel. cast error"]
    assert (mean > 0).all() and mean["fp16"] < mean["bf16"] < mean["nvfp4"]
    assert not summary(table).isna().any().any()          # every statistic defined for every format (nvfp4 too)


def test_raw_fp8_underflow_is_counted_and_the_row_scale_removes_it():
    S = torch.full((1, 1, 16, 16), 1e-4)          # below e4m3's smallest subnormal (2^-9), above fp16's
    S[0, 0, :, 0] = 2e-4
    table = state_format_table({0: S}).set_index("format")
    assert table.loc["e4m3", "frac rounded to zero"] == 1.0
    assert table.loc["e4m3", "rel. cast error"] == 1.0     # everything flushed to zero
    assert table.loc["fp16", "frac rounded to zero"] == 0.0
    # scaled: d = amax / 448 per row, 1e-4 = 224 d exactly; int8: d = amax / 127, 1e-4 = 63.5 d -> 64 d
    assert (table.loc[["fp8", "int8"], "frac rounded to zero"] == 0.0).all()
    assert table.loc["fp8", "rel. cast error"] < 1e-6 and 0.005 < table.loc["int8", "rel. cast error"] < 0.008
    assert table.loc["nvfp4", "rel. cast error"] < 0.2


def test_markdown_escapes_the_pipe_in_column_names():
    S = torch.randn(1, 2, 4, 16)
    table = state_format_table({3: S})
    md = markdown(table, index=False, floatfmt=".3g")
    header = md.splitlines()[0]
    assert "median \\|S\\|" in header and "max \\|S\\|" in header
    # the header has as many unescaped cell separators as the data rows
    cells = lambda line: len(line.replace("\\|", "").split("|"))  # noqa: E731
    assert all(cells(line) == cells(header) for line in md.splitlines())
    assert "nan" not in markdown(summary(table), floatfmt=".3g")


def test_command_writes_nested_out_and_names_its_data(tmp_path, capsys):
    from replayssm_quant.cli import main

    out = tmp_path / "a" / "b.md"
    assert main(["state-stats", "--model", "tiny-mamba2", "--prefill", "16", "--docs", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert "--data sampled --prefill 16 --docs 1`" in text and "Data: sampled:" in text
    assert main(["state-stats", "--model", "tiny-mamba2", "--out", str(tmp_path)]) == 2
    assert "is a folder; pass a file path" in capsys.readouterr().err
