# cell: masks
# loses: test_masks
# why: upper-triangular causal mask: every token sees the future, not the past
#| export attnlab/masks.py
def padding_mask(lengths, max_len):
    if (lengths < 0).any() or (lengths > max_len).any():
        raise ValueError("lengths out of range")
    return (torch.arange(max_len)[None, :] < lengths[:, None])[:, None, None, :]


def causal_mask(t, device=None):
    return torch.ones(t, t, dtype=torch.bool, device=device).triu()
