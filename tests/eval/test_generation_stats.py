"""The lm-eval plugin counts generated tokens and generation time (downstream's per-run results.json)."""

from types import SimpleNamespace

import pytest
import torch

from replayssm_quant.eval.adapters.tiny import tiny_model
from replayssm_quant.eval.lm_eval_plugin import ReplaySSMLM
from replayssm_quant.eval.models.tokenizer import build_byte_tokenizer


def test_generation_stats_count_tokens_and_time():
    lm = ReplaySSMLM(model=tiny_model("mamba2", seed=0), tokenizer=build_byte_tokenizer(), state="nvfp4+sr",
                     device="cpu", batch_size=2)
    assert lm.generation_stats == {"tokens": 0, "seconds": 0.0}
    reqs = [SimpleNamespace(args=(ctx, {"until": ["\u0000"], "max_gen_toks": 5})) for ctx in ("Once upon", "It was")]
    out = lm.generate_until(reqs, disable_tqdm=True)
    assert len(out) == 2
    made = sum(r["gen_tokens"] for r in lm.generation_log)
    assert made > 0 and lm.generation_stats["tokens"] == made and lm.generation_stats["seconds"] > 0
    info = lm.get_model_info()          # what lm-eval writes into its results' config after the evaluation
    assert info["generation_tokens"] == made and info["weights_dtype"] == "float32"
    assert info["generation_tokens_per_s"] == pytest.approx(made / lm.generation_stats["seconds"])
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}
