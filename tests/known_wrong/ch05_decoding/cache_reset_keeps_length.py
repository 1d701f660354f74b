# cell: kv_cache
# loses: test_kv_cache
# why: reset does nothing, so the next sequence is appended after the previous one
#| export attnlab/kv_cache.py
class KVCache:
    """One layer's keys and values, preallocated as (B, H, max_len, D); positions 0 .. length-1 are filled."""

    def __init__(self, batch_size: int, n_heads: int, max_len: int, d_head: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | None = None):
        self.k = torch.zeros(batch_size, n_heads, max_len, d_head, dtype=dtype, device=device)
        self.v = torch.zeros(batch_size, n_heads, max_len, d_head, dtype=dtype, device=device)
        pass

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: (B, H, t_new, D). Returns every cached key and value so far, (B, H, length, D) views."""
        batch_size, n_heads, _, d_head = self.k.shape
        for name, x in (("k", k), ("v", v)):
            if x.dim() != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (batch_size, n_heads, d_head):
                raise ValueError(f"{name} must have shape (B, H, t_new, D) = ({batch_size}, {n_heads}, t_new, "
                                 f"{d_head}), got {tuple(x.shape)}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        if k.dtype != self.k.dtype or v.dtype != self.v.dtype:
            raise ValueError(f"k and v must have the cache's dtype {self.k.dtype}, got {k.dtype} and {v.dtype}")
        t_new = k.shape[2]
        if self.length + t_new > self.max_len:
            raise ValueError(f"the cache holds max_len = {self.max_len} positions; {self.length} are filled and "
                             f"{t_new} more do not fit")
        self.k[:, :, self.length:self.length + t_new] = k
        self.v[:, :, self.length:self.length + t_new] = v
        self.length += t_new
        return self.k[:, :, :self.length], self.v[:, :, :self.length]

    def reset(self) -> None:
        pass
