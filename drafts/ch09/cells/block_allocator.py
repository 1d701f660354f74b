from collections import OrderedDict

# %% cell out_of_blocks given
class OutOfBlocks(RuntimeError):
    """No free block is left in the pool: the scheduler must preempt a sequence, or the request must wait."""


# %% cell block_allocator solution
class BlockAllocator:
    """The physical blocks of a paged KV pool: how many block tables hold each one, and which are free.

    A block is free when no table holds it (ref_count 0). Free blocks are kept oldest-freed first, and a new
    block is taken from the front: a block freed with reusable contents (the prefix cache, exercise 6) stays
    findable for as long as possible, and the least recently used one is evicted first."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks
        self.free_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))   # oldest-freed first
        self.cached: dict[int, int] = {}                 # prefix cache: block hash -> block id
        self.block_hashes: dict[int, int] = {}           # block id -> its hash, for full registered blocks
        self.block_tokens: dict[int, tuple[int, ...]] = {}   # block id -> its tokens, to confirm a hash hit

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def check_held(self, block_id: int) -> None:
        """ValueError unless block_id is a block of this pool that some table holds."""
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block {block_id} is not in the pool of {self.num_blocks} blocks")
        if self.ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free: no block table holds it")

    def allocate(self) -> int:
        """Take the least recently freed block for one table (ref_count 1); OutOfBlocks if none is free."""
        ### BEGIN SOLUTION
        if not self.free_ids:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block_id, _ = self.free_ids.popitem(last=False)
        self.evict(block_id)                  # its contents are about to be overwritten
        self.ref_counts[block_id] = 1
        return block_id
        ### END SOLUTION

    def share(self, block_id: int) -> None:
        """One more table holds block_id, which must be held already."""
        ### BEGIN SOLUTION
        self.check_held(block_id)
        self.ref_counts[block_id] += 1
        ### END SOLUTION

    def free(self, block_id: int) -> None:
        """One table lets go of block_id; the last one to do so returns it to the free blocks, newest last."""
        ### BEGIN SOLUTION
        self.check_held(block_id)
        self.ref_counts[block_id] -= 1
        if self.ref_counts[block_id] == 0:
            self.free_ids[block_id] = None
        ### END SOLUTION

    def revive(self, block_id: int) -> None:
        """A prefix-cache hit on block_id: take it back from the free blocks if it was free, else share it."""
        if self.ref_counts[block_id] == 0:
            del self.free_ids[block_id]
            self.ref_counts[block_id] = 1
        else:
            self.share(block_id)

    def evict(self, block_id: int) -> None:
        """Forget block_id's cached contents (it is being reused for other tokens)."""
        block_hash = self.block_hashes.pop(block_id, None)
        self.block_tokens.pop(block_id, None)
        if block_hash is not None and self.cached.get(block_hash) == block_id:
            del self.cached[block_hash]
