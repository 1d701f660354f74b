# cell: attention_scores
# loses: test_attention_scores test_sdpa test_sdpa_mask
# why: reverses every dimension of k (what k.T does), which is right only for 2-D inputs
#| export attnlab/attention.py
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    _check_attention_inputs(q, k)
    return q @ k.permute(*reversed(range(k.dim()))) / math.sqrt(q.shape[-1])
