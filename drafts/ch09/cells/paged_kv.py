import torch

from attnlab.layers.grouped_attention import grouped_query_attention

# %% cell write_paged solution
def write_paged(k_pool: torch.Tensor, v_pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                slot_mapping: torch.Tensor) -> None:
    """Store new tokens' keys and values in the pool (vLLM's reshape_and_cache).

    k_pool: (num_blocks, block_size, H_kv, D) and v_pool likewise, contiguous (alike for GQA; chapter 8's MLA
    keeps its latent in one and its rotary key in the other); k, v: (N, H_kv, D) each as its pool, N tokens of
    any sequences; slot_mapping: (N,) int, token i's slot, that is row block_id * block_size + offset of the pool
    seen as (num_blocks * block_size, H_kv, D)."""
    ### BEGIN SOLUTION
    if k_pool.shape[:2] != v_pool.shape[:2] or not (k_pool.is_contiguous() and v_pool.is_contiguous()):
        raise ValueError(f"k_pool and v_pool must be contiguous, with the same (num_blocks, block_size), got "
                         f"{tuple(k_pool.shape)} and {tuple(v_pool.shape)}")
    num_blocks, block_size = k_pool.shape[:2]
    n = slot_mapping.shape[0]
    for name, x, pool in (("k", k, k_pool), ("v", v, v_pool)):
        if tuple(x.shape) != (n, *pool.shape[2:]) or x.dtype != pool.dtype:
            raise ValueError(f"{name} must be (N, H_kv, D) = ({n}, {pool.shape[2]}, {pool.shape[3]}) in "
                             f"{pool.dtype}, got {tuple(x.shape)} in {x.dtype}")
    if n and (slot_mapping.min() < 0 or slot_mapping.max() >= num_blocks * block_size):
        raise ValueError(f"slots must be in 0..{num_blocks * block_size - 1}, "
                         f"got {slot_mapping.min()}..{slot_mapping.max()}")
    slots = slot_mapping.long()
    for x, pool in ((k, k_pool), (v, v_pool)):
        pool.view(-1, *pool.shape[2:])[slots] = x
    ### END SOLUTION


# %% cell gather_paged solution
def gather_paged(pool: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor) -> torch.Tensor:
    """Each sequence's cached keys (or values), read through its block table, as one left-padded batch.

    pool: (num_blocks, block_size, H_kv, D); block_tables: (B, max_blocks) int, row b's first
    ceil(context_lens[b] / block_size) entries are its blocks (the rest is padding, never read);
    context_lens: (B,) int >= 1. Returns (B, H_kv, S, D) with S = max(context_lens): row b's tokens
    0 .. len_b - 1 in columns S - len_b .. S - 1, zeros before them, as chapter 5 pads a batch of prompts."""
    ### BEGIN SOLUTION
    num_blocks, block_size, n_kv_heads, d_head = pool.shape
    lens = context_lens.long()
    if lens.dim() != 1 or block_tables.dim() != 2 or block_tables.shape[0] != lens.shape[0]:
        raise ValueError(f"need block_tables (B, max_blocks) and context_lens (B,), got "
                         f"{tuple(block_tables.shape)} and {tuple(context_lens.shape)}")
    if lens.numel() == 0 or lens.min() < 1 or lens.max() > block_tables.shape[1] * block_size:
        raise ValueError(f"context_lens must be in 1..{block_tables.shape[1] * block_size} "
                         f"(max_blocks * block_size), got {lens.tolist()}")
    s = int(lens.max())
    position = torch.arange(s, device=pool.device)[None, :] - (s - lens)[:, None]     # (B, S), < 0 is padding
    real = position >= 0
    position = position.clamp(min=0)
    blocks = block_tables.long().gather(1, position // block_size)                     # (B, S)
    if ((blocks < 0) | (blocks >= num_blocks))[real].any():
        raise ValueError(f"a block table points outside the pool of {num_blocks} blocks")
    slots = torch.where(real, blocks * block_size + position % block_size, 0)
    tokens = pool.view(-1, n_kv_heads, d_head)[slots]                                   # (B, S, H_kv, D)
    tokens = torch.where(real[:, :, None, None], tokens, torch.zeros((), dtype=pool.dtype, device=pool.device))
    return tokens.transpose(1, 2)                                                       # (B, H_kv, S, D)
    ### END SOLUTION


# %% cell paged_attention given
def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                    context_lens: torch.Tensor) -> torch.Tensor:
    """Decode attention on the paged cache, the reference the GPU kernels must equal.

    q: (B, H, 1, D), each sequence's newest query, whose own key is already in the pool; the pools as in
    write_paged; block_tables (B, max_blocks); context_lens (B,). Returns z: (B, H, 1, D)."""
    k = gather_paged(k_pool, block_tables, context_lens)                  # (B, H_kv, S, D)
    v = gather_paged(v_pool, block_tables, context_lens)
    s = k.shape[2]
    real = torch.arange(s, device=q.device)[None, :] >= (s - context_lens.long())[:, None]     # (B, S)
    z, _ = grouped_query_attention(q, k, v, real[:, None, None, :])
    return z
