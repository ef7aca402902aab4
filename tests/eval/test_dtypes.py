"""--dtype values (eval, downstream, lm-eval dtype=): parsed to torch dtypes, bad values one line."""

import pytest
import torch

from replayssm_quant.cli import main
from replayssm_quant.eval.adapters.dtypes import WEIGHT_DTYPES, parse_weight_dtype, weights_dtype
from replayssm_quant.eval.adapters.loading import load_model


def test_parse_weight_dtype():
    assert WEIGHT_DTYPES == ("auto", "bfloat16", "float16", "float32")
    assert parse_weight_dtype("auto") == "auto" and parse_weight_dtype(" BFloat16 ") is torch.bfloat16
    assert parse_weight_dtype("float16") is torch.float16 and parse_weight_dtype(torch.float32) is torch.float32
    for bad in ("fp64", "float64", "bf16", ""):
        with pytest.raises(ValueError, match="unknown dtype .*; valid: auto, bfloat16, float16, float32"):
            parse_weight_dtype(bad)


def test_load_model_dtype_keeps_ssm_state_fp32():
    lm = load_model("tiny-qwen3_5", dtype="bfloat16")
    assert weights_dtype(lm.model) == "bfloat16" and weights_dtype(load_model("tiny-qwen3_5").model) == "float32"
    assert weights_dtype(load_model("gdn-demo").model) == "float32"             # the default: float32
    assert weights_dtype(load_model("gdn-demo", dtype="auto").model) == "bfloat16"   # the checkpoint's
    from replayssm_quant.eval.decode import DecodeSession

    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(0))
    with DecodeSession(lm.model, ["fp32", "nvfp4/fp8+sr"], window=4, backend="torch", exec_mode="chunked") as s:
        s.prefill(ids[:, :4])
        logits = s.feed(ids[:, 4:12])
        assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
        for idx, _, _ in s.layers:
            assert s.caches(idx)[0].hp.data.dtype == torch.float32      # the reference's state: fp32


def test_downstream_bad_dtype_is_one_line(tmp_path, capsys):
    assert main(["downstream", "--dtype", "fp64", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("replayssm-quant downstream: error: unknown dtype 'fp64'")
