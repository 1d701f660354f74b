# cell: softmax
# loses: test_softmax_masked test_sdpa_mask
# why: stable, but a fully masked row gives -inf - (-inf) = nan instead of zeros
#| export attnlab/softmax.py
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    exp = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return exp / exp.sum(dim=dim, keepdim=True)
