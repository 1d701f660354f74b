# cell: attention_scores
# loses: test_attention_scores test_sdpa test_sdpa_mask
# why: k.T, which reverses every dimension of a batched k (torch deprecates .T beyond 2-D); the visible
#      check must name the transpose instead of showing a raw RuntimeError
# says: k.transpose(-2, -1)
#| export attnlab/attention.py
def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    _check_attention_inputs(q, k)
    return q @ k.T / math.sqrt(q.shape[-1])
