from dataclasses import dataclass

import torch

from drafts.ch09.cells.paged_kv import gather_paged, write_paged

# %% cell paged_cache given
@dataclass
class StepLayout:
    """Where one step's tokens sit, shared by every layer's PagedCache.

    Row b has new_lens[b] new tokens (its whole uncached prompt in a prefill, 1 when decoding) and
    context_lens[b] tokens in all once they are written. Rows are left-padded, as in chapter 5: the model's
    token_ids are (B, t_new) with row b's new tokens last, and keys and values come back as (B, H_kv, S, D),
    S = max(context_lens), with row b's last."""

    block_tables: torch.Tensor        # (B, max_blocks) int64
    context_lens: torch.Tensor        # (B,)
    new_lens: torch.Tensor            # (B,)
    slot_mapping: torch.Tensor        # (N,): the slots of the N = sum(new_lens) new tokens, row by row

    @property
    def t_new(self) -> int:
        return int(self.new_lens.max())

    @property
    def past(self) -> int:
        """The cache length the model sees: columns before the new ones."""
        return int(self.context_lens.max()) - self.t_new

    def attention_mask(self) -> torch.Tensor:
        """(B, past + t_new), True at each row's real tokens."""
        s = self.past + self.t_new
        return torch.arange(s)[None, :] >= (s - self.context_lens)[:, None]

    def new_token_mask(self) -> torch.Tensor:
        """(B, t_new), True at each row's real new tokens."""
        return torch.arange(self.t_new)[None, :] >= (self.t_new - self.new_lens)[:, None]


class PagedCache:
    """One layer's keys and values in a paged pool, behind chapter 5's Cache interface, so that chapter 7's
    Llama runs on it unchanged. The engine sets `layout` before each step."""

    def __init__(self, k_pool: torch.Tensor, v_pool: torch.Tensor):
        self.k_pool, self.v_pool = k_pool, v_pool      # (num_blocks, block_size, H_kv, D) each
        self.layout: StepLayout | None = None

    @property
    def length(self) -> int:
        return 0 if self.layout is None else self.layout.past

    @property
    def nbytes(self) -> int:
        return self.k_pool.nbytes + self.v_pool.nbytes

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: (B, H_kv, t_new, D), left-padded new tokens -> every cached key and value, (B, H_kv, S, D)."""
        if self.layout is None:
            raise ValueError("PagedCache.append before the engine set this step's layout")
        real = self.layout.new_token_mask()                                # (B, t_new)
        if tuple(k.shape[:1] + k.shape[2:3]) != tuple(real.shape):
            raise ValueError(f"k must be (B, H_kv, t_new, D) with (B, t_new) = {tuple(real.shape)}, "
                             f"got {tuple(k.shape)}")
        write_paged(self.k_pool, self.v_pool, k.transpose(1, 2)[real], v.transpose(1, 2)[real],
                    self.layout.slot_mapping)
        layout = self.layout
        return (gather_paged(self.k_pool, layout.block_tables, layout.context_lens),
                gather_paged(self.v_pool, layout.block_tables, layout.context_lens))

    def reset(self) -> None:
        self.layout = None
