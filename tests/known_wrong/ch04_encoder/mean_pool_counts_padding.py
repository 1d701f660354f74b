# cell: mean_pool
# loses: test_mean_pool test_minilm_capstone
# why: a plain mean over all positions, padding included
#| export attnlab/pooling.py
def mean_pool(hidden, attention_mask):
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise ValueError("need hidden (B, T, D) and attention_mask (B, T)")
    return hidden.mean(dim=1)
