from collections import deque
from dataclasses import dataclass, field

from drafts.ch09.cells.block_allocator import OutOfBlocks
from drafts.ch09.cells.block_manager import BlockManager, Sequence

# %% cell scheduler solution
@dataclass
class Step:
    """What one engine iteration runs: a prefill of newly admitted sequences, or one decode token for each
    running sequence; and the sequences preempted to make room."""

    kind: str                                        # "prefill" or "decode"
    seqs: list[Sequence]
    preempted: list[Sequence] = field(default_factory=list)


def schedule(waiting: deque[Sequence], running: list[Sequence], manager: BlockManager, max_num_seqs: int,
             max_num_batched_tokens: int, preemption: bool = True) -> Step:
    """One iteration of continuous batching (Orca), prefills first, as vLLM's first scheduler did.

    1. Admit waiting sequences, oldest first, while fewer than max_num_seqs run, their tokens stay within
       max_num_batched_tokens (the first one is always let through) and manager.can_allocate them while
       keeping the blocks the running sequences' next tokens need (manager.blocks_to_append): otherwise the
       next decode step would preempt what was just admitted, forever. Allocate each admitted sequence and move
       it to the end of running. If any were admitted, the step is their prefill.
    2. Otherwise each running sequence, oldest first, gets one decode slot (manager.append). When
       manager.can_append(seq) fails, preempt the newest running sequence (manager.free it, put it back at the
       front of waiting, to be recomputed from its tokens), until it fits; a sequence may preempt itself.
       With preemption off, raise OutOfBlocks before changing anything."""
    ### BEGIN SOLUTION
    admitted, tokens = [], 0
    reserve = sum(manager.blocks_to_append(seq) for seq in running)
    while waiting and len(running) + len(admitted) < max_num_seqs:
        seq = waiting[0]
        if admitted and tokens + len(seq.token_ids) > max_num_batched_tokens:
            break
        if not manager.can_allocate(seq, reserve):
            break
        waiting.popleft()
        manager.allocate(seq)
        admitted.append(seq)
        tokens += len(seq.token_ids)
    if admitted:
        running.extend(admitted)
        return Step("prefill", admitted)

    if not preemption and reserve > manager.allocator.num_free:
        raise OutOfBlocks(f"the running sequences need {reserve} new blocks, {manager.allocator.num_free} are "
                          f"free, and preemption is off")
    scheduled, preempted = [], []
    queue = list(running)
    while queue:
        seq = queue.pop(0)
        while not manager.can_append(seq):
            victim = queue.pop() if queue else seq
            manager.free(victim)
            preempted.append(victim)
            if victim is seq:
                break
        else:
            manager.append(seq)
            scheduled.append(seq)
    for victim in preempted:                  # newest first: the oldest of them ends up at the very front
        waiting.appendleft(victim)
    running[:] = scheduled
    return Step("decode", scheduled, preempted)
    ### END SOLUTION
