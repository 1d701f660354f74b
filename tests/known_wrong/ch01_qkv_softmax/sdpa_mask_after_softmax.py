# cell: scaled_dot_product_attention
# loses: test_sdpa_mask
# why: zeroes blocked weights after the softmax, so the rows no longer sum to 1
#| export attnlab/attention.py
def scaled_dot_product_attention(q, k, v, mask=None):
    _check_attention_inputs(q, k, v, mask)
    weights = softmax(attention_scores(q, k), dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights
