"""Chapter 2: attnlab's multi-head attention and masks against torch.nn.MultiheadAttention."""
import pytest
import torch
from torch import nn

from attnlab.layers.masks import causal_mask, padding_mask
from attnlab.layers.multihead import MultiHeadAttention, merge_heads, split_heads

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def torch_twin(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with mha's weights: its in_proj stacks the q, k, v rows."""
    ref = nn.MultiheadAttention(mha.d_model, mha.n_heads, batch_first=True, dtype=mha.w_q.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        ref.out_proj.load_state_dict(mha.w_o.state_dict())
    return ref.eval()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("b,t_q,t_k,d,h", [(1, 1, 1, 8, 1), (2, 5, 5, 16, 4), (3, 4, 9, 24, 3), (2, 7, 3, 64, 8)])
def test_mha_matches_torch_with_padding_mask(seed, dtype, b, t_q, t_k, d, h):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d, h).to(dtype)
    x_q, x_kv = torch.randn(b, t_q, d, dtype=dtype), torch.randn(b, t_k, d, dtype=dtype)
    lengths = torch.randint(1, t_k + 1, (b,))
    pad = padding_mask(lengths, t_k)
    out, w = mha(x_q, x_kv, mask=pad)
    ref_out, ref_w = torch_twin(mha)(x_q, x_kv, x_kv, key_padding_mask=~pad[:, 0, 0], average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL[dtype])
    torch.testing.assert_close(w, ref_w, **TOL[dtype])


@pytest.mark.parametrize("seed", [0, 1])
def test_causal_self_attention_matches_torch(seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(32, 4).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    out, _ = mha(x, mask=causal_mask(6))
    ref, _ = torch_twin(mha)(x, x, x, attn_mask=~causal_mask(6))
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    # causality: changing the future leaves the past unchanged
    x2 = x.clone()
    x2[:, 4:] += 10
    torch.testing.assert_close(mha(x2, mask=causal_mask(6))[0][:, :4], out[:, :4], rtol=0, atol=1e-12)


def test_split_merge_round_trip_and_head_layout():
    x = torch.randn(3, 5, 12)
    heads = split_heads(x, 4)
    torch.testing.assert_close(heads, torch.stack(x.split(3, dim=-1), dim=1), rtol=0, atol=0)
    torch.testing.assert_close(merge_heads(heads), x, rtol=0, atol=0)


def test_heads_are_independent():
    """Changing the query projection rows of head 1 changes head 1's weights only."""
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(1, 5, 16)
    _, before = mha(x)
    with torch.no_grad():
        mha.w_q.weight[4:8] += 1.0
    _, after = mha(x)
    assert not torch.allclose(before[:, 1], after[:, 1])
    torch.testing.assert_close(torch.cat([before[:, :1], before[:, 2:]], 1), torch.cat([after[:, :1], after[:, 2:]], 1))


def test_padding_contents_do_not_matter():
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(2, 6, 16)
    pad = padding_mask(torch.tensor([6, 2]), 6)
    out = mha(x, mask=pad)[0]
    x2 = x.clone()
    x2[1, 2:] = torch.randn(4, 16) * 1e3
    torch.testing.assert_close(mha(x2, mask=pad)[0][1, :2], out[1, :2], rtol=0, atol=1e-5)


@pytest.mark.parametrize("call,message", [
    (lambda: MultiHeadAttention(10, 3), "not divisible"),
    (lambda: split_heads(torch.zeros(1, 2, 10), 3), "not divisible"),
    (lambda: MultiHeadAttention(8, 2)(torch.zeros(1, 3, 6)), "d_model=8"),
    (lambda: MultiHeadAttention(8, 2)(torch.zeros(1, 3, 8), torch.zeros(2, 3, 8)), "same batch size"),
    (lambda: MultiHeadAttention(8, 2)(torch.zeros(1, 3, 8), mask=torch.ones(3, 3)), "torch.bool"),
    (lambda: MultiHeadAttention(8, 2)(torch.zeros(1, 3, 8), mask=torch.ones(3, 4, dtype=torch.bool)),
     "does not broadcast"),
    (lambda: padding_mask(torch.tensor([5]), 4), "between 0 and max_len"),
    (lambda: padding_mask(torch.tensor([1.5]), 4), "integer"),
])
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
