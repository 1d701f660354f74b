import torch

from drafts.ch09.cells.block_allocator import BlockAllocator

# %% cell block_table solution
def slot_mapping(block_table: list[int], positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """The physical slot of each token position of one sequence: positions (N,) -> slots (N,) int64.

    Position p lives in logical block p // block_size, at offset p % block_size; the block table says which
    physical block that is. Slot s is row s of the pool seen as (num_blocks * block_size, H, D)."""
    ### BEGIN SOLUTION
    positions = torch.as_tensor(positions, dtype=torch.int64)
    table = torch.as_tensor(block_table, dtype=torch.int64)
    logical = positions // block_size
    if positions.numel() and (positions.min() < 0 or logical.max() >= len(block_table)):
        raise ValueError(f"positions must be in 0..{len(block_table) * block_size - 1} for a table of "
                         f"{len(block_table)} blocks of {block_size}, got {positions.min()}..{positions.max()}")
    return table[logical] * block_size + positions % block_size
    ### END SOLUTION


def append_slot(block_table: list[int], num_tokens: int, block_size: int, allocator: BlockAllocator) -> int:
    """Reserve the slot of the token at position num_tokens of a sequence whose table holds num_tokens tokens,
    appending a new block to block_table when the last one is full (or when there is none). Returns the slot."""
    ### BEGIN SOLUTION
    if len(block_table) != -(-num_tokens // block_size):
        raise ValueError(f"a table of {num_tokens} tokens in blocks of {block_size} must hold "
                         f"{-(-num_tokens // block_size)} blocks, got {len(block_table)}")
    if num_tokens % block_size == 0:
        block_table.append(allocator.allocate())
    return block_table[num_tokens // block_size] * block_size + num_tokens % block_size
    ### END SOLUTION
