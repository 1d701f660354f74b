# cell: attention_scores
# loses: test_attention_scores test_sdpa test_sdpa_mask
# why: q @ k without transposing k (only "works" when T_k == d_k)
#| export attnlab/attention.py
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    _check_attention_inputs(q, k)
    return q @ k / math.sqrt(q.shape[-1])
