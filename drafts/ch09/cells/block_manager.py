from dataclasses import dataclass, field

from drafts.ch09.cells.block_allocator import BlockAllocator
from drafts.ch09.cells.block_table import append_slot
from drafts.ch09.cells.copy_on_write import copy_on_write, fork
from drafts.ch09.cells.prefix_cache import cache_full_blocks, match_prefix

# %% cell block_manager given
@dataclass
class Sequence:
    """One request's tokens and its place in the paged pool."""

    seq_id: int
    token_ids: list[int]                 # the prompt, then each generated token
    prompt_len: int
    max_new_tokens: int
    eos_id: int | None = None
    block_table: list[int] = field(default_factory=list)
    num_cached: int = 0                  # tokens whose keys and values are in the pool (the first num_cached)
    new_slots: list[int] = field(default_factory=list)   # this step's slots, for tokens num_cached - len .. on

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.prompt_len

    @property
    def finished(self) -> bool:
        return self.num_generated >= self.max_new_tokens or (
            self.num_generated > 0 and self.eos_id is not None and self.token_ids[-1] == self.eos_id)


class BlockManager:
    """Every sequence's block table over one BlockAllocator: the exercises above, put together."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True):
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two (as GPU kernels tile by it), got {block_size}")
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.copies: list[tuple[int, int]] = []   # copy-on-write (source, destination) blocks, not yet copied

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, seq: Sequence, reserve: int = 0) -> bool:
        """Room for every token of seq with `reserve` blocks to spare (a prefix hit would need fewer blocks;
        this does not count on one)."""
        return self.blocks_for(len(seq.token_ids)) + reserve <= self.allocator.num_free

    def allocate(self, seq: Sequence) -> None:
        """seq's table for a prefill: cached blocks for its longest cached prefix, new slots for the rest."""
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already holds blocks")
        if self.prefix_caching:
            seq.block_table = match_prefix(seq.token_ids, self.block_size, self.allocator)
        seq.num_cached = len(seq.block_table) * self.block_size
        seq.new_slots = [append_slot(seq.block_table, n, self.block_size, self.allocator)
                         for n in range(seq.num_cached, len(seq.token_ids))]
        seq.num_cached = len(seq.token_ids)
        # Entered now, before the prefill computes them: a sequence admitted later in the same step finds them.
        # It reads them in the same forward pass, after this one's keys and values are written in each layer.
        self.cache_blocks(seq)

    def blocks_to_append(self, seq: Sequence) -> int:
        """1 when seq's next token needs a new block (its last block is full, or shared with another table)."""
        full = seq.num_cached % self.block_size == 0
        return int(full or self.allocator.ref_counts[seq.block_table[-1]] > 1)

    def can_append(self, seq: Sequence) -> bool:
        return self.blocks_to_append(seq) <= self.allocator.num_free

    def append(self, seq: Sequence) -> None:
        """The slot of seq's newest token (position num_cached), after copy-on-write if its block is shared."""
        if len(seq.token_ids) != seq.num_cached + 1:
            raise ValueError(f"sequence {seq.seq_id} has {len(seq.token_ids)} tokens and {seq.num_cached} cached: "
                             f"a decode step adds exactly one")
        copied = copy_on_write(seq.block_table, seq.num_cached, self.block_size, self.allocator)
        if copied is not None:
            self.copies.append(copied)
        seq.new_slots = [append_slot(seq.block_table, seq.num_cached, self.block_size, self.allocator)]
        seq.num_cached += 1

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """child continues parent's tokens on parent's blocks, sharing them until one of the two writes."""
        child.block_table = fork(parent.block_table, self.allocator)
        child.num_cached = parent.num_cached

    def free(self, seq: Sequence) -> None:
        """Give back seq's blocks, its last first: the start of a prompt, the likeliest to be shared again,
        is then the last to be evicted."""
        for block_id in reversed(seq.block_table):
            self.allocator.free(block_id)
        seq.block_table, seq.num_cached, seq.new_slots = [], 0, []

    def cache_blocks(self, seq: Sequence) -> None:
        if self.prefix_caching:
            cache_full_blocks(seq.token_ids[:seq.num_cached], seq.block_table, self.block_size, self.allocator)
