# cell: softmax_np
# loses: test_softmax_np
# why: exp of the raw logits overflows (exp(1000) = inf, inf/inf = nan)
# says: Subtract each row's maximum
#| export attnlab/softmax.py
def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    exp = np.exp(x)
    return exp / np.sum(exp, axis=axis, keepdims=True)
