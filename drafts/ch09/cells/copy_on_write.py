from drafts.ch09.cells.block_allocator import BlockAllocator

# %% cell copy_on_write solution
def fork(block_table: list[int], allocator: BlockAllocator) -> list[int]:
    """A child sequence's table: the parent's blocks, now each held by one more table. Nothing is copied."""
    ### BEGIN SOLUTION
    for block_id in block_table:
        allocator.share(block_id)
    return list(block_table)
    ### END SOLUTION


def copy_on_write(block_table: list[int], num_tokens: int, block_size: int,
                  allocator: BlockAllocator) -> tuple[int, int] | None:
    """Before the token at position num_tokens is written: when it goes into the last block and another table
    holds that block too, give this table a block of its own. Returns (source, destination) for the caller to
    copy the block's keys and values, or None when the write touches nobody else's block."""
    ### BEGIN SOLUTION
    if num_tokens % block_size == 0:
        return None                                   # the token opens a new block
    shared = block_table[-1]
    if allocator.ref_counts[shared] == 1:
        return None
    private = allocator.allocate()
    allocator.free(shared)
    block_table[-1] = private
    return shared, private
    ### END SOLUTION
