# cell: softmax_np
# loses: test_softmax_np
# why: shifts, exponentiates and normalises the caller's array in place (x -= max), so the input is destroyed
# says: changed its input array in place
#| export attnlab/softmax.py
def softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    row_max = np.max(x, axis=axis, keepdims=True)
    row_max = np.where(row_max == -np.inf, 0.0, row_max)
    x -= row_max
    np.exp(x, out=x)
    total = np.sum(x, axis=axis, keepdims=True)
    x /= np.where(total == 0, 1.0, total)
    return x
