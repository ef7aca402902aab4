"""state-stats: per-format cast error of real prefilled states."""

import torch

from replayssm_quant.eval.adapters.loading import load_model
from replayssm_quant.eval.state_stats import FORMATS_COMPARED, prefill_states, state_format_table, summary


def test_table_on_a_tiny_model_has_a_row_per_layer_and_format():
    lm = load_model("tiny-qwen3_5")
    ids = torch.randint(0, 256, (2, 24))
    states = prefill_states(lm.model, ids)
    assert states and all(s.dtype == torch.float32 and s.dim() == 4 and s.shape[0] == 2 for s in states.values())
    table = state_format_table(states)
    assert len(table) == len(states) * len(FORMATS_COMPARED)
    mean = summary(table)["rel. cast error"]
    assert (mean > 0).all() and mean["fp16"] < mean["bf16"] < mean["nvfp4"]


def test_fp8_underflow_is_counted():
    S = torch.full((1, 1, 16, 16), 1e-4)          # below fp8's smallest subnormal (2^-9), above fp16's
    table = state_format_table({0: S}).set_index("format")
    assert table.loc["fp8", "frac below min subnormal"] == 1.0
    assert table.loc["fp8", "rel. cast error"] == 1.0     # everything flushed to zero
    assert table.loc["fp16", "frac below min subnormal"] == 0.0
    assert table.loc["nvfp4", "rel. cast error"] < 1e-6   # a constant block: exact up to fp32 scale arithmetic
