from drafts.ch09.cells.block_allocator import BlockAllocator

# %% cell block_hash given
def block_hash(parent_hash: int | None, token_ids: tuple[int, ...]) -> int:
    """The hash of one full block chained to the hash of the block before it (None for the first block): two
    blocks hash alike only when every token before them, and in them, is alike (up to a collision, which the
    caller rules out by comparing the tokens). Python hashes tuples of ints alike in every process; None's
    hash is its address, so the first block chains -1 instead."""
    return hash((-1 if parent_hash is None else parent_hash, token_ids))


# %% cell prefix_cache solution
def cache_full_blocks(token_ids: list[int], block_table: list[int], block_size: int,
                      allocator: BlockAllocator) -> None:
    """Enter each block of block_table that token_ids (the tokens with keys and values in the pool) fill
    completely, and that is not entered yet, into the allocator's prefix cache: cached[hash] = block id, with
    block_hashes and block_tokens beside it."""
    ### BEGIN SOLUTION
    parent = None
    for i in range(len(token_ids) // block_size):
        block_id = block_table[i]
        if block_id in allocator.block_hashes:
            parent = allocator.block_hashes[block_id]
            continue
        tokens = tuple(token_ids[i * block_size:(i + 1) * block_size])
        parent = block_hash(parent, tokens)
        allocator.cached[parent] = block_id
        allocator.block_hashes[block_id] = parent
        allocator.block_tokens[block_id] = tokens
    ### END SOLUTION


def match_prefix(token_ids: list[int], block_size: int, allocator: BlockAllocator) -> list[int]:
    """The cached blocks holding the longest run of token_ids' full blocks from the start, each revived for
    the caller (allocator.revive). The block with the last token is never matched: its logits are needed."""
    ### BEGIN SOLUTION
    table, parent = [], None
    for i in range((len(token_ids) - 1) // block_size):
        tokens = tuple(token_ids[i * block_size:(i + 1) * block_size])
        parent = block_hash(parent, tokens)
        block_id = allocator.cached.get(parent)
        if block_id is None or allocator.block_tokens[block_id] != tokens:
            break
        allocator.revive(block_id)
        table.append(block_id)
    return table
    ### END SOLUTION
