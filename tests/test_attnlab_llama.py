"""Chapter 7's attnlab against transformers' Llama (tiny configs and SmolLM2-135M-Instruct's real weights), the
metamorphic checks (GQA with n_kv_heads = n_heads is multi-head attention, cached equals recomputed, a left-padded
batch equals each prompt alone), the tokenizer against the GGUF file's own chat template, and bad input."""
from __future__ import annotations

import copy
from unittest.mock import patch

import pytest
import torch
from attnlab.decoding.generation import generate
from attnlab.decoding.layout import SPLIT_MAX_ROWS, DecodingLinear, prepare_for_decoding
from attnlab.layers.grouped_attention import GroupedQueryAttention
from attnlab.layers.multihead import MultiHeadAttention
from attnlab.models.llama import Llama, LlamaConfig
from attnlab.weights.gguf import llama_config_from_gguf, load_llama_gguf, read_gguf, smollm2_path, unpermute_qk
from attnlab.weights.gguf_tokenizer import chat_prompt, tokenizer_from_gguf
from tests.decoding_checks import assert_cached_equals_recomputed_and_padding_equals_alone
from tests.llama_reference import transformers_twin

BMM = torch.bmm            # the real one, for the test that watches DecodingLinear call it


def tiny(n_kv_heads: int, theta: float, seed: int = 0, tie: bool = True) -> Llama:
    torch.manual_seed(seed)
    model = Llama(LlamaConfig(vocab_size=60, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, d_ff=48, n_layers=2,
                              max_seq_len=64, rope_theta=theta, tie_embeddings=tie)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.3)
    return model


@pytest.mark.parametrize("n_kv_heads,theta,tie", [(4, 10000.0, True), (2, 100000.0, True), (1, 10000.0, False),
                                                  (2, 500000.0, False)])
def test_llama_equals_transformers_logits_and_greedy_tokens(n_kv_heads, theta, tie):
    model = tiny(n_kv_heads, theta, tie=tie)
    hf = transformers_twin(model)
    ids = torch.randint(0, 60, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, rtol=1e-5, atol=1e-5)
        ours = generate(model, ids, 12).tokens
        theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert torch.equal(ours, theirs)


def test_cached_generation_equals_recomputation_and_left_padding_equals_each_prompt_alone():
    model = tiny(2, 100000.0, seed=3)
    assert_cached_equals_recomputed_and_padding_equals_alone(model)


def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention():
    """With n_kv_heads = n_heads and no rotation, the layer computes chapter 2's MultiHeadAttention."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 6, bias=False)
    gqa = GroupedQueryAttention(24, 6, 6, rope_fn=lambda x, positions, theta: x)
    for ours, theirs in (("w_q", "w_q"), ("w_k", "w_k"), ("w_v", "w_v"), ("w_o", "w_o")):
        getattr(gqa, ours).weight.data.copy_(getattr(mha, theirs).weight.data)
    x = torch.randn(2, 7, 24)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    torch.testing.assert_close(gqa(x, mask), mha(x, mask=mask)[0])


def test_mqa_is_gqa_with_one_kv_head_copied_to_every_query_head():
    """n_kv_heads = 1 (multi-query) equals the same model with the one K/V head copied into n_heads heads."""
    mqa = tiny(1, 10000.0, seed=4)
    mha = Llama(LlamaConfig(**{**mqa.config.__dict__, "n_kv_heads": 4})).eval()
    state = mqa.state_dict()
    for i in range(mqa.config.n_layers):
        for name in ("w_k", "w_v"):
            key = f"layers.{i}.attn.{name}.weight"
            state[key] = state[key].repeat(4, 1)                     # (d_head, d) -> (4 * d_head, d): 4 equal heads
    mha.load_state_dict(state)
    ids = torch.randint(0, 60, (2, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(mqa(ids), mha(ids), rtol=1e-5, atol=1e-5)
    assert sum(c.nbytes for c in mqa.new_caches(1, 8)) * 4 == sum(c.nbytes for c in mha.new_caches(1, 8))


@pytest.fixture(scope="module")
def smollm2():
    model, metadata = load_llama_gguf(max_seq_len=512)
    return model, metadata, tokenizer_from_gguf(metadata)


def test_smollm2_config_and_cache_bytes_per_token(smollm2):
    model, metadata, _ = smollm2
    c = model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_ff, c.vocab_size, c.rope_theta) == \
        (30, 576, 9, 3, 1536, 49152, 100000.0)
    assert c.tie_embeddings and model.lm_head.weight is model.token.weight
    per_token = sum(cache.nbytes for cache in model.new_caches(1, 1))
    assert per_token == 2 * c.n_layers * c.n_kv_heads * c.d_head * 4 == 46_080


def test_smollm2_on_attnlab_equals_transformers_on_the_same_weights(smollm2):
    model, metadata, tokenizer = smollm2
    hf = transformers_twin(model)
    questions = ["What is the capital of France?", "Write a haiku about the sea.", "What is 12 times 7?"]
    with torch.no_grad():
        for question in questions:
            ids = torch.tensor([tokenizer.encode(chat_prompt([{"role": "user", "content": question}])).ids])
            # The spike this chapter started from measured 7e-5 between two float32 implementations; summation
            # order differs (rotate-half by cat, attention by the course's softmax), so allow a little more.
            torch.testing.assert_close(model(ids), hf(ids).logits, rtol=0, atol=5e-4)
            ours = generate(model, ids, 16).tokens
            theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False,
                                 min_new_tokens=16)
            assert torch.equal(ours, theirs), (tokenizer.decode(ours[0].tolist()), tokenizer.decode(theirs[0].tolist()))


def test_smollm2_answers_on_attnlab(smollm2):
    from attnlab.chat import Chat
    model, metadata, _ = smollm2
    chat = Chat(model, metadata, max_new_tokens=30)
    pieces = []
    assert "Paris" in chat.reply("What is the capital of France?", show=pieces.append)
    assert len(pieces) > 3 and "".join(pieces) == chat.messages[-1]["content"], "the answer is streamed"
    second = chat.reply("And of Italy?")
    assert "Rome" in second and len(chat.messages) == 4


def test_prepared_for_decoding_smollm2_is_the_same_model_in_the_same_memory(smollm2):
    """prepare_for_decoding changes how the weights lie in memory, not what the model computes."""
    model, metadata, tokenizer = smollm2
    before = torch.get_num_threads()
    torch.set_num_threads(2)            # so that the products split between threads are the ones checked
    try:
        _check_prepared_smollm2(model, tokenizer)
    finally:
        torch.set_num_threads(before)


def _check_prepared_smollm2(model: Llama, tokenizer) -> None:
    fast = prepare_for_decoding(copy.deepcopy(model))
    fused = prepare_for_decoding(copy.deepcopy(model), fused_attention=True)
    assert fast.lm_head.stored.shape == (576, 49152) and fast.layers[0].feed_forward.w_down.stored.shape == (1536, 576)
    # Still tied, and in one matrix: the embedding is a view of the output layer's stored weight.
    assert fast.token.weight.data_ptr() == fast.lm_head.stored.data_ptr()
    assert torch.equal(fast.token.weight, model.token.weight)
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in fast.parameters()}
    assert sum(storages.values()) == sum(p.nbytes for p in model.parameters())
    for ours, theirs in zip(fast.modules(), model.modules()):
        if isinstance(theirs, torch.nn.Linear):
            assert torch.equal(ours.weight, theirs.weight)
    ids = torch.tensor([tokenizer.encode(chat_prompt([{"role": "user", "content": "What is 12 times 7?"}])).ids])
    with torch.no_grad():
        # Both builds sum in another order than the model as built, so neither equals its float32 logits exactly.
        # Measured against float64 logits, the model's own float32 rounding error sets the scale: a reordered
        # sum lands within twice of it (both about 1e-4 here); a misplaced weight is off by whole units.
        exact = copy.deepcopy(model).double()(ids)
        rounding = (model(ids).double() - exact).abs().max()
        for name, build in (("layout", fast), ("layout + fused attention", fused)):
            error = (build(ids).double() - exact).abs().max()
            assert error <= 2 * rounding, f"{name}: {error:.2e} from the float64 logits, float32's own is {rounding:.2e}"
        reference = generate(model, ids, 16).tokens
        assert torch.equal(generate(fast, ids, 16).tokens, reference)
        assert torch.equal(generate(fused, ids, 16).tokens, reference)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("in_features,out_features", [(5, 7), (7, 5), (6, 6), (12, 4)])
@pytest.mark.parametrize("rows", [1, 12, SPLIT_MAX_ROWS + 1])
def test_decoding_linear_equals_nn_linear_with_and_without_bias(in_features, out_features, threads, rows):
    """Split between the threads (in_features divisible by them, few rows) or not, it computes nn.Linear."""
    torch.manual_seed(0)
    x = torch.randn(rows, 1, in_features)
    split_calls = []
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for bias in (True, False):
            linear = torch.nn.Linear(in_features, out_features, bias=bias)
            decoding = DecodingLinear(linear)
            assert decoding.weight.shape == (out_features, in_features)
            assert decoding.weight.data_ptr() == decoding.stored.data_ptr(), "weight is a view of the stored matrix"
            with patch.object(torch, "bmm", side_effect=lambda *a: split_calls.append(1) or BMM(*a)):
                torch.testing.assert_close(decoding(x), linear(x), rtol=1e-6, atol=1e-6)
    finally:
        torch.set_num_threads(before)
    expect_split = threads > 1 and in_features % threads == 0 and rows <= SPLIT_MAX_ROWS
    assert bool(split_calls) == expect_split, f"split taken: {bool(split_calls)}, expected {expect_split}"


def test_a_single_new_token_skips_the_mask_only_when_it_sees_everything():
    """The decoding shortcut in Llama.forward: no mask for one unpadded token, the padding mask otherwise."""
    model = tiny(2, 10000.0, seed=4)
    seen = []

    def recording(q, k, v, mask=None, attention_fn=model.layers[0].attn.attention_fn):
        seen.append(mask)
        return attention_fn(q, k, v, mask)

    for layer in model.layers:
        layer.attn.attention_fn = recording
    caches = model.new_caches(1, 8)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), caches=caches)
        model(torch.tensor([[4]]), caches=caches)
        padded = torch.tensor([[False, True, True, True, True]])
        caches = model.new_caches(1, 8)
        model(torch.tensor([[0, 2, 3, 4]]), padded[:, :4], caches)
        model(torch.tensor([[5]]), padded, caches)
    prefill, step, padded_prefill, padded_step = seen[::2]
    assert prefill is not None and step is None and padded_prefill is not None
    assert padded_step is not None and not padded_step.all(), "the padding position stays masked"


def test_loading_without_the_unpermutation_talks_nonsense(smollm2):
    """The trap the chapter measures: llama.cpp's row order in a rotate-half model runs, with other logits."""
    model, metadata, tokenizer = smollm2
    wrong, _ = load_llama_gguf(max_seq_len=512, unpermute=lambda weight, n_heads: weight)
    ids = torch.tensor([tokenizer.encode(chat_prompt([{"role": "user", "content": "What is the capital of France?"}])).ids])
    with torch.no_grad():
        right_logits, wrong_logits = model(ids), wrong(ids)
    assert (right_logits - wrong_logits).abs().max() > 5
    assert (right_logits.argmax(-1) == wrong_logits.argmax(-1)).float().mean() < 0.9


def test_tokenizer_and_chat_prompt_follow_the_gguf_file(smollm2):
    import jinja2
    _, metadata, tokenizer = smollm2
    messages = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "2024 is a year."}]
    template = jinja2.Environment().from_string(metadata["tokenizer.chat_template"])
    assert chat_prompt(messages) == template.render(messages=messages, add_generation_prompt=True)
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    assert chat_prompt(with_system) == template.render(messages=with_system, add_generation_prompt=True)
    encoding = tokenizer.encode(chat_prompt(messages))
    assert encoding.tokens[0] == "<|im_start|>" and encoding.tokens.count("<|im_end|>") == 4
    assert [t for t in tokenizer.encode("2024").tokens] == ["2", "0", "2", "4"], "digits are split one by one"
    text = "Ünïcode, émojis 🙂 and  two spaces"
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="n_kv_heads"):
        LlamaConfig(vocab_size=10, d_model=32, n_heads=4, n_kv_heads=3, d_ff=8, n_layers=1)
    with pytest.raises(ValueError, match="even d_head"):
        LlamaConfig(vocab_size=10, d_model=36, n_heads=4, n_kv_heads=2, d_ff=8, n_layers=1)
    with pytest.raises(ValueError, match="n_heads"):
        GroupedQueryAttention(32, 6, 4)
    with pytest.raises(ValueError, match="architecture 'llama'"):
        llama_config_from_gguf({"general.architecture": "gpt2"}, [])
    with pytest.raises(ValueError, match="no GGUF file") as missing:
        read_gguf(smollm2_path().with_name("missing.gguf"))
    assert isinstance(missing.value, FileNotFoundError), "and the exception Python uses for a missing file"
    with pytest.raises(ValueError, match="even size"):
        unpermute_qk(torch.zeros(6, 4), 2)
    model = tiny(2, 10000.0)
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(model, torch.zeros(1, 60, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        read_gguf(bogus)


def test_open_gguf_reads_what_ggufs_own_reader_reads():
    """open_gguf parses a plain view of the mapped file instead of gguf's np.memmap: every field, every tensor's
    type, shape and bytes must be the ones gguf.GGUFReader gives."""
    import gguf
    import numpy as np

    from attnlab.weights.gguf import open_gguf
    theirs, ours = gguf.GGUFReader(smollm2_path()), open_gguf(smollm2_path())
    assert list(ours.fields) == list(theirs.fields) and len(theirs.fields) > 20
    for key, field in theirs.fields.items():
        assert ours.fields[key].contents() == field.contents(), key
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors] and len(theirs.tensors) > 200
    for mine, reference in zip(ours.tensors, theirs.tensors):
        assert (mine.tensor_type, list(mine.shape)) == (reference.tensor_type, list(reference.shape)), mine.name
        assert np.array_equal(mine.data, reference.data), mine.name
    assert type(ours.tensors[0].data) is np.ndarray, "the plain view is what makes it fast"
