"""transformers' DeepseekV3ForCausalLM and DeepseekV2ForCausalLM holding the weights of an attnlab MLAModel: the
references of chapter 8's tests and benchmarks. Every layer is dense (first_k_dense_replace = n_layers)."""
from __future__ import annotations

from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

from attnlab.models.mla import MLAModel

# attnlab's names of one layer's weights -> transformers' (w_q, or w_dq, q_norm and w_uq, as q_lora_rank says)
LAYER_NAMES = {"attn.w_q": "self_attn.q_proj", "attn.w_dq": "self_attn.q_a_proj",
               "attn.q_norm": "self_attn.q_a_layernorm", "attn.w_uq": "self_attn.q_b_proj",
               "attn.w_dkv": "self_attn.kv_a_proj_with_mqa", "attn.kv_norm": "self_attn.kv_a_layernorm",
               "attn.w_ukv": "self_attn.kv_b_proj", "attn.w_o": "self_attn.o_proj",
               "norm1": "input_layernorm", "norm2": "post_attention_layernorm",
               "feed_forward.w_gate": "mlp.gate_proj", "feed_forward.w_up": "mlp.up_proj",
               "feed_forward.w_down": "mlp.down_proj"}


def deepseek_twin(model: MLAModel, version: int = 3) -> DeepseekV3ForCausalLM | DeepseekV2ForCausalLM:
    """DeepseekV{version}ForCausalLM (eval mode, eager attention) with the configuration and weights of `model`;
    no special tokens, so that generate() never stops early."""
    c = model.config
    if c.n_rope_heads != 1 or not c.latent_norm:
        raise ValueError("transformers' DeepSeek models have one shared rotary key head and normalised latents")
    config_class, model_class = {3: (DeepseekV3Config, DeepseekV3ForCausalLM),
                                 2: (DeepseekV2Config, DeepseekV2ForCausalLM)}[version]
    hf_config = config_class(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff, num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_heads, q_lora_rank=c.q_lora_rank,
        kv_lora_rank=c.kv_lora_rank, qk_nope_head_dim=c.qk_nope_head_dim, qk_rope_head_dim=c.qk_rope_head_dim,
        v_head_dim=c.v_head_dim, first_k_dense_replace=c.n_layers, n_routed_experts=4, num_experts_per_tok=2,
        n_group=1, topk_group=1, moe_intermediate_size=8, max_position_embeddings=c.max_seq_len,
        rms_norm_eps=c.eps, tie_word_embeddings=c.tie_embeddings, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta})
    hf_config._attn_implementation = "eager"
    hf = model_class(hf_config).eval()
    state = {"model.embed_tokens.weight": model.token.weight, "model.norm.weight": model.final_norm.weight,
             "lm_head.weight": model.lm_head.weight}
    for i, layer in enumerate(model.layers):
        modules = dict(layer.named_modules())
        state |= {f"model.layers.{i}.{theirs}.weight": modules[ours].weight
                  for ours, theirs in LAYER_NAMES.items() if ours in modules}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if [name for name in missing if "rotary" not in name] or unexpected:
        raise ValueError(f"weights do not fit transformers' model: missing {missing}, unexpected {unexpected}")
    return hf
