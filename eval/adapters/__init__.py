"""Hugging Face model adapters: route every SSM layer's decode step through :class:`SSMStateCache`.

* :mod:`.families` -- the per-architecture translation (GDN, KDA, Mamba-2)
* :mod:`.hooks`    -- the per-layer routing of the model's decode-step function
* :mod:`.loading`  -- ``--model`` names to (model, tokenizer)
* :mod:`.tiny`     -- tiny random configs of every supported architecture (tests, smoke runs)

The decoding session built on these is :class:`replayssm_quant.eval.decode.DecodeSession`.
"""

from .families import SUPPORTED_MODELS, Family, family_of  # noqa: F401


def ssm_layers(model):
    """``[(layer_idx, module, Family)]`` for every supported SSM mixer in ``model``, in layer order."""
    out = []
    for _, m in model.named_modules():
        fam = family_of(m)
        if fam is not None:
            out.append((int(m.layer_idx), m, fam))
    out.sort(key=lambda t: t[0])
    return out
