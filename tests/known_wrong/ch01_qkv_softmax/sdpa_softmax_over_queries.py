# cell: scaled_dot_product_attention
# loses: test_sdpa test_sdpa_mask
# why: normalises over the queries (dim=-2) instead of over the keys of each query
#| export attnlab/attention.py
def scaled_dot_product_attention(q, k, v, mask=None):
    _check_attention_inputs(q, k, v, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-2)
    return weights @ v, weights
