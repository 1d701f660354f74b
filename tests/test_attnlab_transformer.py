"""Chapter 6's reference attnlab: the decoder layer and the encoder-decoder Transformer against torch's
nn.TransformerDecoderLayer and nn.Transformer (same weights, dropout 0, eval), and the decoder-only CausalLM
against Hugging Face transformers' GPT2LMHeadModel built from a tiny config."""
import pytest
import torch
from torch import nn

from attnlab.layers.decoder_layer import DecoderLayer, cross_attention
from attnlab.decoding.generation import generate
from attnlab.weights.gpt2 import causal_lm_config_from_gpt2, load_gpt2
from attnlab.layers.multihead import MultiHeadAttention
from attnlab.models.encoder_decoder import Transformer, TransformerConfig


def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.out_proj.load_state_dict(ours.w_o.state_dict())


@torch.no_grad()
def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.cross_attn, theirs.multihead_attn)
    theirs.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
    for i in (1, 2, 3):
        getattr(theirs, f"norm{i}").load_state_dict(getattr(ours, f"add_norm{i}").norm.state_dict())


@torch.no_grad()
def torch_transformer(model: Transformer) -> nn.Transformer:
    """nn.Transformer holding model's weights (embeddings and lm_head stay outside, as torch has none)."""
    c = model.config
    ref = nn.Transformer(c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff, dropout=0.0,
                         activation=c.activation, batch_first=True, norm_first=c.norm_first, layer_norm_eps=c.eps)
    for ours, theirs in zip(model.encoder.layers, ref.encoder.layers):
        copy_attention(ours.self_attn, theirs.self_attn)
        theirs.linear1.load_state_dict(ours.feed_forward.linear1.state_dict())
        theirs.linear2.load_state_dict(ours.feed_forward.linear2.state_dict())
        theirs.norm1.load_state_dict(ours.add_norm1.norm.state_dict())
        theirs.norm2.load_state_dict(ours.add_norm2.norm.state_dict())
    for ours, theirs in zip(model.decoder_layers, ref.decoder.layers):
        copy_decoder_layer(ours, theirs)
    if c.norm_first:
        ref.encoder.norm.load_state_dict(model.encoder.final_norm.state_dict())
        ref.decoder.norm.load_state_dict(model.final_norm.state_dict())
    else:
        # nn.Transformer always adds a final norm to both stacks; a post-norm stack (the paper) has none.
        ref.encoder.norm = ref.decoder.norm = None
    return ref.to(model.lm_head.weight.dtype).eval()


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_decoder_layer_equals_torch_decoder_layer(norm_first, activation):
    torch.manual_seed(0)
    ours = DecoderLayer(32, 4, 64, activation, norm_first).double().eval()
    theirs = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                        norm_first=norm_first, dtype=torch.float64).eval()
    copy_decoder_layer(ours, theirs)
    x, memory = torch.randn(3, 6, 32, dtype=torch.float64), torch.randn(3, 9, 32, dtype=torch.float64)
    source_mask = torch.arange(9)[None, :] < torch.tensor([9, 5, 1])[:, None]
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    expected = theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~source_mask)
    torch.testing.assert_close(ours(x, memory, causal, source_mask), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_equals_torch_transformer(norm_first):
    torch.manual_seed(1)
    config = TransformerConfig(source_vocab_size=40, target_vocab_size=30, d_model=32, n_heads=4, d_ff=64,
                               n_encoder_layers=2, n_decoder_layers=3, max_seq_len=20, norm_first=norm_first)
    model = Transformer(config).double().eval()
    ref = torch_transformer(model)
    source, target = torch.randint(4, 40, (3, 8)), torch.randint(4, 30, (3, 7))
    source_mask = torch.arange(8)[None, :] < torch.tensor([8, 3, 5])[:, None]
    target_mask = torch.arange(7)[None, :] < torch.tensor([7, 7, 4])[:, None]
    logits = model(source, target, source_mask, target_mask)
    hidden = ref(model.encoder.embeddings(source), model.target_embeddings(target),
                 tgt_mask=nn.Transformer.generate_square_subsequent_mask(7, dtype=torch.bool),
                 src_key_padding_mask=~source_mask, tgt_key_padding_mask=~target_mask,
                 memory_key_padding_mask=~source_mask)
    expected = model.lm_head(hidden)
    torch.testing.assert_close(logits[target_mask], expected[target_mask], rtol=1e-10, atol=1e-10)


def test_cross_attention_has_no_causal_mask_and_ignores_source_padding():
    torch.manual_seed(2)
    attn = MultiHeadAttention(16, 2).double().eval()
    x, memory = torch.randn(1, 3, 16, dtype=torch.float64), torch.randn(1, 5, 16, dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False, False]])
    out, weights = cross_attention(attn, x, memory, mask)
    assert (weights[..., 0, :3] > 0).all() and (weights[..., 3:] == 0).all()
    memory2 = memory.clone()
    memory2[:, 3:] = 100.0
    torch.testing.assert_close(cross_attention(attn, x, memory2, mask)[0], out)


def tiny_gpt2(seed: int = 0, **overrides):
    from transformers import GPT2Config, GPT2LMHeadModel
    settings = dict(vocab_size=97, n_positions=128, n_embd=48, n_layer=3, n_head=4, activation_function="gelu",
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    settings.update(overrides)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(**settings)).eval()
    with torch.no_grad():        # wider than GPT-2's 0.02 init, so that greedy text does not repeat one token
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def test_gpt2_logits_equal_transformers():
    hf = tiny_gpt2()
    ours = load_gpt2(hf)
    ids = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf(ids).logits
        assert (ours(ids) - expected).abs().max().item() <= 1e-4 * expected.abs().max().item()
        # the same with a left-padded batch: the padded row's real tokens get the prompt-alone logits
        mask = torch.ones(3, 20, dtype=torch.bool)
        mask[1, :6] = False
        alone = hf(ids[1:2, 6:]).logits
        torch.testing.assert_close(ours(ids, attention_mask=mask)[1, 6:], alone[0], rtol=1e-4, atol=1e-4)


def test_gpt2_greedy_generation_with_cache_equals_transformers_generate():
    hf = tiny_gpt2(seed=1)
    ours = load_gpt2(hf)
    prompt = torch.randint(0, 97, (3, 8), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[1, :5] = False                                   # row 1 is a 3-token prompt, left-padded
    with torch.no_grad():
        theirs = hf.generate(prompt, attention_mask=mask.long(), max_new_tokens=40, do_sample=False,
                             use_cache=True, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    mine = generate(ours, prompt, 40, attention_mask=mask)
    assert torch.equal(mine.tokens, theirs.sequences)
    # Every step's logits, not only the chosen tokens (an untrained model soon repeats itself).
    their_logits = torch.stack(theirs.logits, dim=1)                    # (B, 40, vocab)
    assert (mine.logits - their_logits).abs().max().item() <= 1e-4 * their_logits.abs().max().item()


def test_gpt2_with_its_own_activation_is_refused_clearly():
    with pytest.raises(ValueError, match="gelu_new"):
        causal_lm_config_from_gpt2(tiny_gpt2(activation_function="gelu_new").config)


def test_gpt2_conv1d_weights_are_transposed_linear_weights():
    hf = tiny_gpt2(seed=5)
    ours = load_gpt2(hf)
    c_fc = hf.transformer.h[0].mlp.c_fc
    x = torch.randn(4, 48)
    torch.testing.assert_close(ours.layers[0].feed_forward.linear1(x), c_fc(x))


@pytest.mark.parametrize("option, value", [("tie_word_embeddings", False), ("scale_attn_weights", False),
                                           ("scale_attn_by_inverse_layer_idx", True), ("add_cross_attention", True)])
def test_gpt2_options_causal_lm_does_not_implement_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        causal_lm_config_from_gpt2(tiny_gpt2(**{option: value}).config)
