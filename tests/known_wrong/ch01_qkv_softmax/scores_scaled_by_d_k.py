# cell: attention_scores
# loses: test_attention_scores test_sdpa test_sdpa_mask
# why: divides by d_k instead of sqrt(d_k)
#| export attnlab/attention.py
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    _check_attention_inputs(q, k)
    return q @ k.transpose(-2, -1) / q.shape[-1]
