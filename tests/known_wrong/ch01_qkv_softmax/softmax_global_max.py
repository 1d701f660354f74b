# cell: softmax
# loses: test_softmax
# why: subtracts one maximum for the whole tensor instead of each row's own: a row far below the others
#      underflows to 0 / 0; the visible inputs have rows of similar size, so only the hidden tests catch it
# says: shift each row by its own maximum
#| export attnlab/softmax.py
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    row_max = x.max()
    row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    exp = torch.exp(x - row_max)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / torch.where(total == 0, torch.ones_like(total), total)
