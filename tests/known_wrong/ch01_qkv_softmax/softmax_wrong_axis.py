# cell: softmax
# loses: test_softmax test_softmax_masked test_sdpa test_sdpa_mask
# why: normalises over the first dimension instead of `dim`
#| export attnlab/softmax.py
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    row_max = x.amax(dim=0, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(x - row_max)
    total = exp.sum(dim=0, keepdim=True)
    return exp / torch.where(total == 0, torch.ones_like(total), total)
