"""eval/adapters/loading.py: the model content hash that run folders are resumed against."""

import torch

from replayssm_quant.eval.adapters.loading import model_fingerprint
from replayssm_quant.eval.adapters.tiny import tiny_model


def test_fingerprint_is_content_not_location():
    """The same weights and config loaded from two places hash the same (a moved install or a copied model folder
    still resumes its runs); another weight or another config value does not."""
    a, b = tiny_model("qwen3_5"), tiny_model("qwen3_5")
    a.config._name_or_path = "/venv-a/site-packages/replayssm_quant/eval/default_models/gdn-long"
    b.config._name_or_path = "/elsewhere/gdn"
    assert model_fingerprint(a) == model_fingerprint(b)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1.0
    assert model_fingerprint(a) != model_fingerprint(b)
    c = tiny_model("qwen3_5")
    c.config.rms_norm_eps = c.config.rms_norm_eps * 2
    assert model_fingerprint(a) != model_fingerprint(c)
