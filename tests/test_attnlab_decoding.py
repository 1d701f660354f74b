"""Chapter 5's reference attnlab: the decoder mask, the KV cache, the decoder-only model and generation.

References written by someone else: F.scaled_dot_product_attention (is_causal for the square case) and the
logits processors of Hugging Face transformers for temperature, top-k and top-p. Metamorphic checks: cached
decoding equals recomputation at every step, later tokens do not change earlier outputs, a left-padded batch
decodes as each prompt alone, prefilling in chunks equals prefilling at once.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.models.causal_lm import CausalLM, CausalLMConfig, CausalSelfAttention
from attnlab.layers.masks import causal_mask_with_past, decoder_self_attention_mask
from attnlab.decoding.generation import generate
from attnlab.layers.kv_cache import KVCache
from attnlab.decoding.sampling import filter_logits, next_token


def random_model(config: CausalLMConfig, seed: int, std: float = 0.3, dtype=torch.float32) -> CausalLM:
    """Weights drawn wider than the default so that greedy choices vary from step to step."""
    torch.manual_seed(seed)
    model = CausalLM(config).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
    return model.eval()


CONFIGS = [CausalLMConfig(vocab_size=64, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_seq_len=64),
           CausalLMConfig(vocab_size=101, d_model=48, n_heads=6, d_ff=96, n_layers=3, max_seq_len=80, activation="relu")]


def test_mask_with_past_is_the_bottom_of_the_square_mask():
    for t_new, past in [(1, 0), (5, 0), (1, 7), (3, 4)]:
        square = torch.ones(past + t_new, past + t_new, dtype=torch.bool).tril()
        assert torch.equal(causal_mask_with_past(t_new, past), square[past:])


def test_square_mask_matches_torch_is_causal():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 6, 8, dtype=torch.float64).unbind(0)
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask_with_past(6))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_top_left_causal_flag_is_wrong_for_a_decoding_step():
    """Why the mask takes `past`: torch's is_causal aligns the triangle top-left, so one query sees one key."""
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(top_left, v[:, :, :1])            # the newest token sees only token 0
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask_with_past(1, past=4))
    torch.testing.assert_close(right, F.scaled_dot_product_attention(q, k, v))   # it may see everything


def test_cached_attention_equals_torch_attention_with_an_explicit_mask():
    torch.manual_seed(2)
    attn = CausalSelfAttention(16, 4).double().eval()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    cache = KVCache(2, 4, 7, 4, dtype=torch.float64)
    # a prefill of 4, one decoding step, then a chunk of 2: each with the mask the model builds for it
    pieces = [attn(x[:, :4], causal_mask_with_past(4, 0), cache=cache),
              attn(x[:, 4:5], causal_mask_with_past(1, 4), cache=cache),
              attn(x[:, 5:], causal_mask_with_past(2, 5), cache=cache)]
    mha = nn.MultiheadAttention(16, 4, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([attn.w_q.weight, attn.w_k.weight, attn.w_v.weight]))
        mha.in_proj_bias.copy_(torch.cat([attn.w_q.bias, attn.w_k.bias, attn.w_v.bias]))
        mha.out_proj.load_state_dict(attn.w_o.state_dict())
    blocked = torch.ones(7, 7, dtype=torch.bool).triu(1)             # torch's convention: True = may not attend
    expected, _ = mha(x, x, x, attn_mask=blocked)
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected)


@pytest.mark.parametrize("config", CONFIGS)
def test_cached_generation_equals_recomputation_at_every_step(config):
    model = random_model(config, seed=3)
    prompt = torch.randint(0, config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(4))
    cached = generate(model, prompt, 40)
    full = generate(model, prompt, 40, use_cache=False)
    assert cached.logits.dtype == torch.float32
    assert (cached.logits - full.logits).abs().max().item() <= 1e-5
    assert torch.equal(cached.tokens, full.tokens)
    # Untrained models soon repeat one token under greedy decoding; sampling keeps the inputs varied.
    sampled = [generate(model, prompt, 40, use_cache=c, temperature=1.0, generator=torch.Generator().manual_seed(5))
               for c in (True, False)]
    assert len(set(sampled[0].tokens[:, 9:].flatten().tolist())) > 20
    assert (sampled[0].logits - sampled[1].logits).abs().max().item() <= 1e-5
    assert torch.equal(sampled[0].tokens, sampled[1].tokens)


def test_greedy_generation_equals_a_hand_written_argmax_loop():
    model = random_model(CONFIGS[0], seed=5, dtype=torch.float64)
    seq = torch.randint(0, 64, (2, 4), generator=torch.Generator().manual_seed(6))
    out = generate(model, seq, 12).tokens
    with torch.no_grad():
        for _ in range(12):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_later_tokens_do_not_change_earlier_outputs():
    model = random_model(CONFIGS[1], seed=7, dtype=torch.float64)
    ids = torch.randint(0, 101, (2, 12), generator=torch.Generator().manual_seed(8))
    changed = ids.clone()
    changed[:, 7:] = torch.randint(0, 101, (2, 5), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=0)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-3


def test_left_padded_batch_decodes_as_each_prompt_alone():
    model = random_model(CONFIGS[0], seed=10, dtype=torch.float64)
    g = torch.Generator().manual_seed(11)
    prompts = [torch.randint(0, 64, (n,), generator=g) for n in (7, 1, 4, 7)]
    batch, mask = torch.zeros(4, 7, dtype=torch.long), torch.zeros(4, 7, dtype=torch.bool)
    for b, p in enumerate(prompts):
        batch[b, 7 - len(p):], mask[b, 7 - len(p):] = p, True
    together = generate(model, batch, 15, attention_mask=mask)
    for b, p in enumerate(prompts):
        alone = generate(model, p[None], 15)
        assert torch.equal(together.tokens[b, 7:], alone.tokens[0, len(p):])
        torch.testing.assert_close(together.logits[b], alone.logits[0], rtol=1e-10, atol=1e-10)


def test_prefill_in_chunks_equals_prefill_at_once():
    model = random_model(CONFIGS[1], seed=12)
    ids = torch.randint(0, 101, (2, 10), generator=torch.Generator().manual_seed(13))
    caches = model.new_caches(2, 10)
    with torch.no_grad():
        chunks = [model(ids[:, :3], caches=caches), model(ids[:, 3:4], caches=caches), model(ids[:, 4:], caches=caches)]
        whole = model(ids)
    assert (torch.cat(chunks, dim=1) - whole).abs().max().item() <= 1e-5


def test_cache_memory_is_two_layers_batch_heads_length_head_dim_numbers():
    c = CausalLMConfig(vocab_size=10, d_model=768, n_heads=12, d_ff=3072, n_layers=12, max_seq_len=1024)
    caches = CausalLM(c).new_caches(batch_size=1)
    # 2 (K and V) x 12 layers x 1 sequence x 12 heads x 1024 positions x 64 dims x 4 bytes = 75.5 MB (GPT-2 small)
    assert sum(cache.nbytes for cache in caches) == 2 * 12 * 1 * 12 * 1024 * 64 * 4


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, None, None), (1.0, 5, None), (1.0, None, 0.8),
                                                        (1.3, 7, 0.6), (1.0, None, 0.05)])
def test_filters_match_transformers_logits_processors(temperature, top_k, top_p):
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)
    torch.manual_seed(14)
    logits = torch.randn(6, 50) * 3
    expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k is not None:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p is not None:
        expected = TopPLogitsWarper(top_p)(None, expected)
    ours = filter_logits(logits, temperature, top_k, top_p)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    torch.testing.assert_close(ours[~torch.isinf(ours)], expected[~torch.isinf(expected)])


def test_sampling_is_seeded_and_greedy_is_argmax():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(15))
    a = next_token(logits, 1.0, top_k=10, generator=torch.Generator().manual_seed(16))
    b = next_token(logits, 1.0, top_k=10, generator=torch.Generator().manual_seed(16))
    assert torch.equal(a, b)
    assert torch.equal(next_token(logits), logits.argmax(-1))
    assert torch.equal(next_token(logits, 1.0, top_k=1), logits.argmax(-1))


def test_sampled_generation_is_the_same_with_and_without_the_cache():
    model = random_model(CONFIGS[0], seed=17)
    prompt = torch.randint(0, 64, (2, 3), generator=torch.Generator().manual_seed(18))
    runs = [generate(model, prompt, 20, use_cache=c, temperature=0.9, top_p=0.9,
                     generator=torch.Generator().manual_seed(19)).tokens for c in (True, False)]
    assert torch.equal(*runs)


@pytest.mark.parametrize("call, message", [
    (lambda m: generate(m, torch.zeros(1, 60, dtype=torch.long), 10), "max_seq_len"),
    (lambda m: generate(m, torch.zeros(1, 0, dtype=torch.long), 3), "T >= 1"),
    (lambda m: m(torch.tensor([[1, 64]])), "token ids must be in 0..63"),
    (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), "empty"),
    (lambda m: m(torch.zeros(1, 65, dtype=torch.long)), "max_seq_len"),
    (lambda m: KVCache(1, 2, 3, 4).append(torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4)), "max_len = 3"),
    (lambda m: KVCache(1, 2, 3, 4).append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4)), "(B, H, t_new, D)"),
    (lambda m: m.new_caches(1, 100), "max_seq_len"),
    (lambda m: generate(m, torch.ones(2, 3, dtype=torch.long), 2,
                        attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()), "left-padded"),
    (lambda m: KVCache(1, 2, 3, 4).append(torch.zeros(1, 2, 1, 4, dtype=torch.float64),
                                          torch.zeros(1, 2, 1, 4, dtype=torch.float64)), "dtype"),
    (lambda m: filter_logits(torch.zeros(1, 3), top_p=1.5), "top_p"),
    (lambda m: decoder_self_attention_mask(2, 3, torch.ones(1, 4, dtype=torch.bool)), "(B, past + t_new)"),
])
def test_bad_input_raises_a_clear_error(call, message):
    model = CausalLM(CONFIGS[0]).eval()
    with pytest.raises(ValueError, match=None) as error:
        call(model)
    assert message in str(error.value), str(error.value)


def test_cache_used_past_its_capacity_during_decoding():
    model = random_model(CONFIGS[0], seed=20)
    caches = model.new_caches(1, 4)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), caches=caches)
        model(torch.tensor([[4]]), caches=caches)
        with pytest.raises(ValueError, match="max_len = 4"):
            model(torch.tensor([[5]]), caches=caches)
