# cell: split_merge_heads
# loses: test_split_merge_heads test_mha_self test_mha_cross_and_masks
# why: splits correctly but merges with a plain reshape, interleaving tokens and heads
#| export attnlab/multihead.py
def split_heads(x, n_heads):
    if x.dim() != 3 or x.shape[-1] % n_heads:
        raise ValueError("d_model is not divisible by n_heads")
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.reshape(b, t, h * d)
