# cell: scaled_dot_product_attention
# loses: test_sdpa_mask
# why: masks with -1e9 instead of -inf: a query whose every key is masked gets uniform weights, not zeros
# says: mask the scores with -inf
#| export attnlab/attention.py
def scaled_dot_product_attention(q, k, v, mask=None):
    _check_attention_inputs(q, k, v, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = softmax(scores, dim=-1)
    return weights @ v, weights
