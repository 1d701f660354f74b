# cell: softmax_np
# loses: test_softmax_np
# why: always normalises the last axis; only the hidden tests pass another axis
# says: axis=
#| export attnlab/softmax.py
def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    row_max = np.max(x, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    exp = np.exp(x - row_max)
    total = np.sum(exp, axis=-1, keepdims=True)
    return (exp / np.where(total == 0, 1.0, total)).astype(x.dtype)
