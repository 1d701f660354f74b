"""The reference attnlab (chapter 1) against torch's own softmax and scaled dot-product attention."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlab.layers.attention import attention_scores, scaled_dot_product_attention
from attnlab.layers.softmax import softmax, softmax_np

# Tolerances per dtype: float32 results of a length-n reduction differ from another implementation's by
# a few ulps times sqrt(n) (eps32 = 1.2e-7); float64 ones by ~1e-16 per operation.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-13)}
SEEDS = [0, 1, 2]
SHAPES = [(5,), (3, 7), (2, 4, 9), (2, 3, 4, 16)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_matches_torch_along_every_dim(seed, dtype, shape):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=dtype) * 10
    for dim in range(-len(shape), len(shape)):
        got = softmax(x, dim=dim)
        assert got.dtype == dtype
        torch.testing.assert_close(got, torch.softmax(x, dim=dim), **TOL[dtype])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_np_matches_torch(seed, dtype, shape):
    x = (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)
    for axis in range(-len(shape), len(shape)):
        got = softmax_np(x, axis=axis)
        assert got.dtype == dtype
        ref = torch.softmax(torch.from_numpy(x), dim=axis).numpy()
        tol = TOL[torch.float32] if dtype == np.float32 else TOL[torch.float64]
        np.testing.assert_allclose(got, ref, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_is_stable_for_huge_logits(dtype):
    x = torch.tensor([[1e4, 1e4 + 1, 1e4 + 2], [-1e4, 0.0, 1e4]], dtype=dtype)
    got = softmax(x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.softmax(x, dim=-1), **TOL[dtype])
    # Softmax is invariant to adding a constant to a row: the first row is softmax([0, 1, 2]).
    torch.testing.assert_close(got[0], torch.softmax(torch.tensor([0.0, 1.0, 2.0], dtype=dtype), 0), **TOL[dtype])


def test_fully_masked_rows_get_zeros_and_masked_positions_get_exact_zero():
    x = torch.randn(4, 6).masked_fill(torch.tensor([[False] * 6, [True] * 6, [False, True] * 3, [True] * 5 + [False]]),
                                      float("-inf"))
    for probs in (softmax(x), torch.from_numpy(softmax_np(x.numpy()))):
        assert not torch.isnan(probs).any()
        assert (probs[1] == 0).all()
        assert (probs[torch.isinf(x)] == 0).all()
        torch.testing.assert_close(probs[[0, 2, 3]].sum(-1), torch.ones(3))
        torch.testing.assert_close(probs[[0, 2, 3]], torch.softmax(x[[0, 2, 3]], dim=-1))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lead,t_q,t_k,d_k,d_v", [((), 1, 1, 4, 4), ((), 5, 9, 16, 3), ((3,), 7, 7, 8, 8),
                                                   ((2, 4), 6, 11, 64, 32)])
def test_sdpa_matches_torch(seed, dtype, lead, t_q, t_k, d_k, d_v):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, t_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*lead, t_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*lead, t_k, d_v, generator=g, dtype=dtype)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL[dtype])
    torch.testing.assert_close(attention_scores(q, k), q @ k.transpose(-2, -1) / d_k ** 0.5, **TOL[dtype])
    torch.testing.assert_close(weights.sum(-1), torch.ones(*lead, t_q, dtype=dtype), **TOL[dtype])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mask_shape", [(6, 9), (2, 1, 1, 9), (2, 3, 6, 9), (1, 9)])
def test_sdpa_with_boolean_masks_matches_torch(seed, mask_shape):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, t, 8, generator=g, dtype=torch.float64) for t in (6, 9, 9))
    mask = torch.rand(mask_shape, generator=g) > 0.5
    mask[..., 0] = True          # every query keeps at least one key here; fully masked rows are tested below
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL[torch.float64])
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_fully_masked_query_gives_zero_output_like_torch():
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert (out[0, 1] == 0).all() and (weights[0, 1] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_mask_with_huge_scores_leaks_nothing():
    # With a -1e4 bias instead of -inf, a blocked key whose score is 2e8 higher would win.
    q = torch.tensor([[1.0, 0.0]]) * 1e4
    k = torch.tensor([[1.0, 0.0], [-1.0, 0.0]]) * 1e4
    v = torch.tensor([[5.0], [7.0]])
    out, _ = scaled_dot_product_attention(q, k, v, mask=torch.tensor([[False, True]]))
    assert out.item() == 7.0


def test_worked_example_zao_shang_hao():
    """The chapter's construction: scores (a, a, 0)/sqrt(2) with a = sqrt(2) ln 2 give weights (0.4, 0.4, 0.2)."""
    a = 2 ** 0.5 * np.log(2)
    k = torch.tensor([[1.0, 1.0], [1.0, -1.0], [0.0, 1.0]], dtype=torch.float64)
    q = torch.tensor([[a, 0.0]], dtype=torch.float64)
    _, weights = scaled_dot_product_attention(q, k, torch.eye(3, dtype=torch.float64))
    torch.testing.assert_close(weights[0], torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64))


@pytest.mark.parametrize("args,kwargs,message", [
    ((torch.randn(3, 4), torch.randn(5, 6), torch.randn(5, 2)), {}, "same last dimension d_k"),
    ((torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 2)), {}, "v must have shape"),
    ((torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 2)), {}, "same batch dimensions"),
    ((torch.randn(4), torch.randn(5, 4), torch.randn(5, 2)), {}, "shape (..., T, d)"),
    ((torch.ones(3, 4, dtype=torch.long), torch.randn(5, 4), torch.randn(5, 2)), {}, "floating-point"),
    ((torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)), {"mask": torch.ones(3, 5)}, "torch.bool"),
    ((torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)), {"mask": torch.ones(3, 4, dtype=torch.bool)},
     "does not broadcast"),
    (([[1.0]], torch.randn(5, 4), torch.randn(5, 2)), {}, "must be a torch.Tensor"),
])
def test_bad_input_raises_a_clear_value_error(args, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        scaled_dot_product_attention(*args, **kwargs)
