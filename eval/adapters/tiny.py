"""Tiny random hybrid models built from configs in code (no hub access).

Used by the tests and by ``replayssm-quant eval --model tiny-ARCH`` for smoke runs (the
vocabulary, 264, fits the byte tokenizer of :mod:`replayssm_quant.eval.models.tokenizer`).
Every SSM layer keeps the real layer classes of transformers 5.17; only the
sizes are small. Weights are random (seeded), the model is fp32.
"""

from __future__ import annotations

TINY_ARCHS = ("qwen3_5", "qwen3_next", "nemotron_h", "mamba2", "kimi_linear")


def tiny_config(arch: str, vocab_size: int = 264):
    """A small ``PretrainedConfig`` for ``arch`` (one of :data:`TINY_ARCHS`)."""
    import transformers as T

    if arch == "qwen3_5":
        return T.Qwen3_5TextConfig(
            vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=8, layer_types=["linear_attention", "full_attention", "linear_attention"])
    if arch == "qwen3_next":
        return T.Qwen3NextConfig(
            vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=8, layer_types=["linear_attention", "full_attention"],
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, decoder_sparse_step=1)
    if arch == "nemotron_h":
        return T.NemotronHConfig(
            vocab_size=vocab_size, hidden_size=64, layers_block_type=["mamba", "attention", "mlp", "mamba"],
            num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=96,
            ssm_state_size=16, mamba_num_heads=4, mamba_head_dim=16, n_groups=2, expand=1,
            chunk_size=16, use_mamba_kernels=False)
    if arch == "mamba2":
        return T.Mamba2Config(
            vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16,
            state_size=16, n_groups=2, expand=2, chunk_size=16)
    if arch == "kimi_linear":
        return T.KimiLinearConfig(
            vocab_size=vocab_size, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
            num_local_experts=4, num_experts_per_tok=2, linear_head_dim=16, linear_num_heads=2,
            layer_types=["linear_attention", "full_attention"],
            mlp_layer_types=["dense", "dense"], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    raise ValueError(f"unknown tiny architecture {arch!r}; valid: {', '.join(TINY_ARCHS)}")


def tiny_model(arch: str, seed: int = 0, vocab_size: int = 264):
    """A random fp32 ``*ForCausalLM`` of ``arch`` in eval mode (seeded)."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(arch, vocab_size)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    _mamba2_time_steps(model)
    _visible_state(model)
    return model.eval()


def _visible_state(model) -> None:
    """Peaked output distributions (lm_head x 30: random logits are otherwise ~0.5 wide, so any KL
    is ~1e-8) and slow GDN decays (A in [0.01, 0.3]; the stock init up to 16 forgets the state within
    a step), so that state precision shows in the KL of a tiny random model."""
    import torch

    from .families import GDN, family_of

    g = torch.Generator().manual_seed(4321)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)
        for m in model.modules():
            if family_of(m) is GDN:
                m.A_log.copy_(torch.log(torch.rand(m.A_log.shape, generator=g) * 0.29 + 0.01))


def _mamba2_time_steps(model) -> None:
    """Make every Mamba-2 mixer's output depend on its state: dt log-uniform in [0.05, 0.5],
    A = -1..-H (state memory of a few to tens of tokens), D = 0 (no skip path) and larger
    in_proj / conv1d weights. With the
    stock random inits the state is ~1e-6 against a D * x skip of ~0.1 (or dt ~ 5 forgets it at
    once), so state precision would be invisible in the logits of a tiny random model."""
    import math

    import torch

    from .families import MAMBA2, family_of

    g = torch.Generator().manual_seed(1234)
    for m in model.modules():
        if family_of(m) is MAMBA2:
            H = m.num_heads
            dt = torch.exp(torch.rand(H, generator=g) * (math.log(0.5) - math.log(0.05)) + math.log(0.05))
            with torch.no_grad():
                m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
                m.A_log.copy_(torch.log(torch.arange(1, H + 1, dtype=torch.float32)))
                m.D.zero_()
                m.in_proj.weight.mul_(4.0)   # x, B, C of order 1 (the stock init makes y ~ 1e-8, far
                m.conv1d.weight.mul_(8.0)    # below the gated RMSNorm's epsilon)
