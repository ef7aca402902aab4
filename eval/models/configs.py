"""The embedded architectures, as stock Hugging Face configs.

* ``gdn``: Qwen3.5 text (``model_type="qwen3_5_text"``, :class:`Qwen3_5ForCausalLM`): Gated
  DeltaNet layers with a full (gated, partial-RoPE) attention layer every 4th layer.
* ``mamba2``: Nemotron-H (``model_type="nemotron_h"``, :class:`NemotronHForCausalLM`): Mamba-2,
  MLP and (NoPE) attention blocks; attention after every 3 Mamba/MLP pairs.
* ``gdn-long``: Qwen3.5 text with ONE small attention layer, the first: it sees only the byte
  embeddings, so it cannot compose an induction (copy / key-value lookup) circuit, and everything
  that must be carried over a distance goes through the GDN states of the layers after it
  (transformers' Qwen3.5 has no sliding window and fails with no attention layer at all).
* ``mamba2-long``: pure Mamba-2 (``model_type="mamba2"``, :class:`Mamba2ForCausalLM`): no attention.

The ``-long`` models start with small per-step decay (:func:`init_long_memory`: A in
:data:`LONG_A_RANGE`, dt in :data:`LONG_DT_RANGE`, log-uniform), which decides whether the
trained heads keep memory (DESIGN.md sec. 9).

Both are byte-level (vocab :data:`~.tokenizer.MODEL_VOCAB_SIZE`), about 5-6M parameters, and load
with ``AutoModelForCausalLM`` and no extra kernels (transformers' torch fallbacks).
``size="tiny"`` gives a ~0.1M-parameter version of the same layout for CPU tests.
"""

from __future__ import annotations

import math

from .tokenizer import BOS_ID, EOS_ID, MODEL_VOCAB_SIZE, PAD_ID

ARCHS = ("gdn", "mamba2", "gdn-long", "mamba2-long")
#: the long-memory architectures (:func:`init_long_memory` applied at build time)
LONG_ARCHS = ("gdn-long", "mamba2-long")
SIZES = ("default", "tiny")

# hidden, layers(gdn), intermediate(gdn), heads, kv heads, head_dim, lin k heads, lin v heads, lin head dim
_GDN = {
    "default": dict(hidden_size=256, num_hidden_layers=8, intermediate_size=512, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                    linear_key_head_dim=64, linear_value_head_dim=64),
    "tiny": dict(hidden_size=32, num_hidden_layers=4, intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2,
                 linear_key_head_dim=16, linear_value_head_dim=16),
}
_MAMBA2 = {
    "default": dict(hidden_size=256, pattern="M-M-M*-M-M-M*-", intermediate_size=1024, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=64, mamba_num_heads=8, mamba_head_dim=64, n_groups=2,
                    ssm_state_size=64, chunk_size=128),
    "tiny": dict(hidden_size=32, pattern="M-M*-", intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=16, mamba_num_heads=4, mamba_head_dim=16, n_groups=2,
                 ssm_state_size=16, chunk_size=16),
}
# gdn-long: layer 0 attention (tiny), then GDN layers
_GDN_LONG = {
    "default": dict(hidden_size=256, num_hidden_layers=6, intermediate_size=512, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                    linear_key_head_dim=64, linear_value_head_dim=64),
    "tiny": dict(hidden_size=32, num_hidden_layers=3, intermediate_size=64, num_attention_heads=1,
                 num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2,
                 linear_key_head_dim=16, linear_value_head_dim=16),
}
_MAMBA2_LONG = {
    "default": dict(hidden_size=256, num_hidden_layers=8, num_heads=8, head_dim=64, n_groups=2, state_size=64,
                    chunk_size=128),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, n_groups=2, state_size=16,
                 chunk_size=16),
}
#: initial continuous decay rates A (= exp(A_log)) and step sizes dt of the -long models, log-uniform
LONG_A_RANGE = (0.01, 1.0)
LONG_DT_RANGE = (1e-4, 1e-2)
#: full attention every this many GDN layers (Qwen3.5's full_attention_interval)
GDN_ATTENTION_INTERVAL = 4
#: RoPE base of the GDN model's attention layers: small, so that every rotary frequency turns
#: through full periods (longest period ~1.5K) inside the 8K training context, so 16K evaluation sees no new angles
GDN_ROPE_THETA = 500.0


def _check(arch: str, size: str):
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; allowed: {', '.join(ARCHS)}")
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; allowed: {', '.join(SIZES)}")


def build_config(arch: str, size: str = "default", max_position_embeddings: int = 65536):
    """The stock ``PreTrainedConfig`` of ``arch`` (one of :data:`ARCHS`) at ``size`` ('default' or 'tiny')."""
    _check(arch, size)
    special = dict(vocab_size=MODEL_VOCAB_SIZE, pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
                   tie_word_embeddings=False)
    if arch == "mamba2-long":
        from transformers import Mamba2Config

        return Mamba2Config(**_MAMBA2_LONG[size], **special, expand=2, conv_kernel=4, use_bias=False,
                            use_conv_bias=True, hidden_act="silu", residual_in_fp32=False, layer_norm_epsilon=1e-5,
                            time_step_min=LONG_DT_RANGE[0], time_step_max=LONG_DT_RANGE[1],
                            time_step_floor=LONG_DT_RANGE[0])
    if arch in ("gdn", "gdn-long"):
        from transformers import Qwen3_5TextConfig

        c = dict((_GDN if arch == "gdn" else _GDN_LONG)[size])
        n = c["num_hidden_layers"]
        if arch == "gdn":
            layer_types = ["full_attention" if (i + 1) % GDN_ATTENTION_INTERVAL == 0 else "linear_attention"
                           for i in range(n)]
        else:
            layer_types = ["full_attention"] + ["linear_attention"] * (n - 1)
        return Qwen3_5TextConfig(
            **c, **special, layer_types=layer_types, linear_conv_kernel_dim=4, hidden_act="silu",
            max_position_embeddings=max_position_embeddings, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": GDN_ROPE_THETA, "partial_rotary_factor": 0.25},
        )
    from transformers import NemotronHConfig

    c = dict(_MAMBA2[size])
    pattern = c.pop("pattern")
    return NemotronHConfig(
        **c, **special, layers_block_type=NemotronHConfig._pattern_to_list(pattern),
        max_position_embeddings=max_position_embeddings, mlp_hidden_act="relu2", conv_kernel=4, expand=2,
        use_mamba_kernels=False, use_conv_bias=True, mamba_proj_bias=False, use_bias=False,
        residual_in_fp32=False, num_logits_to_keep=1,
    )


def build_model(arch: str, size: str = "default", seed: int = 0, dt_range: tuple = LONG_DT_RANGE):
    """A freshly initialised ``AutoModelForCausalLM`` of ``arch`` (fp32, CPU), seeded
    (the ``-long`` archs with :func:`init_long_memory`, step sizes log-uniform in ``dt_range``)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(build_config(arch, size))
    if arch in LONG_ARCHS:
        init_long_memory(model, dt_range=dt_range, seed=seed)
    return model


def ssm_mixers(model) -> list:
    """``[(layer index, mixer module)]`` of every GDN / Mamba-2 mixer of a stock model, in layer order."""
    base = getattr(model, "model", None) or getattr(model, "backbone")
    out = []
    for i, layer in enumerate(base.layers):
        mixer = getattr(layer, "linear_attn", None) or getattr(layer, "mixer", None)
        if mixer is not None and hasattr(mixer, "A_log") and hasattr(mixer, "dt_bias"):
            out.append((i, mixer))
    return out


def init_long_memory(model, a_range=LONG_A_RANGE, dt_range=LONG_DT_RANGE, seed: int = 0):
    """Set every SSM mixer's ``A_log`` = log A and ``dt_bias`` = softplus^-1(dt), with A and dt
    log-uniform in ``a_range`` / ``dt_range`` (independent per head; generator seeded by ``seed``).

    Per-token decay is ``exp(-A * softplus(x + dt_bias))`` in both families (x: the input-dependent
    part), so small A * dt means heads that start out remembering over thousands of tokens.
    """
    import torch

    gen = torch.Generator().manual_seed(10_007 + seed)

    def loguniform(n, lo, hi):
        u = torch.rand(n, generator=gen, dtype=torch.float64)
        return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))

    with torch.no_grad():
        for _, m in ssm_mixers(model):
            n = m.A_log.numel()
            A, dt = loguniform(n, *a_range), loguniform(n, *dt_range)
            m.A_log.copy_(A.log().to(m.A_log.dtype))
            m.dt_bias.copy_((dt + torch.log(-torch.expm1(-dt))).to(m.dt_bias.dtype))   # softplus^-1


def layer_kinds(config) -> list[str]:
    """Per layer 'ssm' (GDN or Mamba-2 mixer), 'attention' or 'mlp', read from a stock config."""
    kinds = {"linear_attention": "ssm", "full_attention": "attention", "mlp": "mlp", "moe": "moe", "mamba": "ssm"}
    if config.model_type == "mamba2":
        return ["ssm"] * config.num_hidden_layers
    types = config.layers_block_type if config.model_type == "nemotron_h" else config.layer_types
    return [kinds[t] for t in types]


def arch_of(config) -> str:
    """'gdn' or 'mamba2' from a config's model_type (ValueError otherwise)."""
    if config.model_type in ("qwen3_5_text", "qwen3_5", "qwen3_next"):
        return "gdn"
    if config.model_type in ("nemotron_h", "mamba2"):
        return "mamba2"
    raise ValueError(f"model_type {config.model_type!r} is neither a GDN (qwen3_5_text) nor a Mamba-2 "
                     f"(nemotron_h, mamba2) model")
