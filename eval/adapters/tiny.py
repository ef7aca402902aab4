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
    return model.eval()
