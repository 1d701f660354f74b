# cell: scaled_dot_product_attention
# loses: test_sdpa_mask
# why: a -1e4 bias instead of -inf lets a blocked key with a huge score through (minGPT issue 75);
#      only the hidden tests use scores that large
# says: -inf
#| export attnlab/attention.py
def scaled_dot_product_attention(q, k, v, mask=None):
    _check_attention_inputs(q, k, v, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)
    weights = softmax(scores, dim=-1)
    return weights @ v, weights
