"""transformers' LlamaForCausalLM holding the weights of an attnlab Llama: the reference of chapter 7's tests and
benchmarks."""
from __future__ import annotations

from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM

from attnlab.models.llama import Llama

# attnlab's names of one layer's weights -> transformers'
LAYER_NAMES = {"attn.w_q": "self_attn.q_proj", "attn.w_k": "self_attn.k_proj", "attn.w_v": "self_attn.v_proj",
               "attn.w_o": "self_attn.o_proj", "feed_forward.w_gate": "mlp.gate_proj",
               "feed_forward.w_up": "mlp.up_proj", "feed_forward.w_down": "mlp.down_proj",
               "norm1": "input_layernorm", "norm2": "post_attention_layernorm"}


def transformers_twin(model: Llama) -> LlamaForCausalLM:
    """LlamaForCausalLM (eval mode) with the configuration and weights of `model`; no special tokens, so that
    generate() never stops early."""
    c = model.config
    hf = LlamaForCausalLM(HFLlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff, num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads, rope_theta=c.rope_theta,
        rms_norm_eps=c.eps, max_position_embeddings=c.max_seq_len, tie_word_embeddings=c.tie_embeddings,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)).eval()
    state = {"model.embed_tokens.weight": model.token.weight, "model.norm.weight": model.final_norm.weight,
             "lm_head.weight": model.lm_head.weight}
    for i, layer in enumerate(model.layers):
        for ours, theirs in LAYER_NAMES.items():
            state[f"model.layers.{i}.{theirs}.weight"] = layer.get_submodule(ours).weight
    hf.load_state_dict(state)
    return hf
