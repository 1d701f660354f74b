"""The test cells of chapter 9's notebook: {grade_id: (points, source)}."""

TESTS = {}

TESTS["test_block_allocator"] = (2, r'''"""BlockAllocator: a free list, reference counts, and the least recently freed block reused first."""
pool = BlockAllocator(4)
a, b = pool.allocate(), pool.allocate()
assert (a, b) == (0, 1) and pool.num_free == 2, (
    f"a new pool of 4 hands out blocks 0, 1, ... in order and then has 2 free; got {a}, {b} and {pool.num_free} free")
assert pool.ref_counts[a] == 1, f"a newly allocated block is held by one table, got ref_count {pool.ref_counts[a]}"
pool.share(a)
assert pool.ref_counts[a] == 2, f"share adds a holder: expected ref_count 2, got {pool.ref_counts[a]}"
pool.free(a)
assert pool.ref_counts[a] == 1 and pool.num_free == 2, (
    f"a block held by two tables stays in use when one frees it: expected ref_count 1 and 2 free, got "
    f"{pool.ref_counts[a]} and {pool.num_free} (is the count decremented on every free?)")
pool.free(a)
assert pool.ref_counts[a] == 0 and pool.num_free == 3, (
    f"the last holder's free returns the block: expected ref_count 0 and 3 free, got {pool.ref_counts[a]} and "
    f"{pool.num_free} (is the count decremented on every free?)")
pool.free(b)
reused = [pool.allocate() for _ in range(4)]
assert reused == [2, 3, 0, 1], (
    f"blocks 2 and 3 were never used, then 0 and 1 were freed in that order: the least recently freed block comes "
    f"first, so expected [2, 3, 0, 1], got {reused}")
try:
    pool.allocate()
except OutOfBlocks:
    pass
else:
    raise AssertionError("allocate on a pool with no free block must raise OutOfBlocks")
print("BlockAllocator: visible checks passed.")
### BEGIN HIDDEN TESTS
import random as _random
for bad in (lambda: BlockAllocator(3).free(0), lambda: BlockAllocator(3).share(1), lambda: pool.free(7),
            lambda: pool.share(-1)):
    try:
        bad()
    except ValueError:
        pass
    else:
        raise AssertionError("freeing or sharing a free block, or one outside the pool, must raise ValueError")
cached = BlockAllocator(2)
first = cached.allocate()
cached.cached[1234], cached.block_hashes[first], cached.block_tokens[first] = first, 1234, (5, 6)
cached.free(first)
assert cached.cached == {1234: first}, "a freed block keeps its cached contents until it is reused"
assert cached.allocate() != first, "the never-used block comes before the freed one"
assert cached.allocate() == first and cached.cached == {}, "reusing a block evicts its cached contents"
rng = _random.Random(9)
model_counts, pool = [0] * 16, BlockAllocator(16)
for _ in range(3000):
    held = [i for i, n in enumerate(model_counts) if n]
    op = rng.random()
    if op < 0.4 and pool.num_free:
        model_counts[pool.allocate()] += 1
    elif op < 0.6 and held:
        block = rng.choice(held)
        pool.share(block)
        model_counts[block] += 1
    elif held:
        block = rng.choice(held)
        pool.free(block)
        model_counts[block] -= 1
    assert pool.ref_counts == model_counts, "after a random run of allocate, share and free, a count is wrong"
    assert pool.num_free == model_counts.count(0), "free blocks must be exactly those with ref_count 0"
### END HIDDEN TESTS''')

TESTS["test_block_table"] = (3, r'''"""slot_mapping and append_slot: logical positions to physical slots through the block table."""
class _Scripted:
    """A stand-in allocator that hands out the given block ids in order."""
    def __init__(self, ids):
        self.ids = list(ids)
    def allocate(self):
        return self.ids.pop(0)

slots = slot_mapping([7, 2, 5], torch.arange(10), 4)
assert slots.dtype == torch.int64, f"slots are int64 indices, got {slots.dtype}"
assert slots.tolist() == [28, 29, 30, 31, 8, 9, 10, 11, 20, 21], (
    f"with table [7, 2, 5] and blocks of 4, position p is slot table[p // 4] * 4 + p % 4: expected "
    f"[28, 29, 30, 31, 8, 9, 10, 11, 20, 21], got {slots.tolist()} (the physical block, not the logical one)")
table, allocator = [], _Scripted([3, 9])
got = [append_slot(table, n, 4, allocator) for n in range(6)]
assert table == [3, 9], (
    f"six tokens in blocks of 4 need two blocks, taken when tokens 0 and 4 arrive: expected table [3, 9], got {table}")
assert got == [12, 13, 14, 15, 36, 37], f"expected slots [12, 13, 14, 15, 36, 37], got {got}"
print("slot_mapping and append_slot: visible checks passed.")
### BEGIN HIDDEN TESTS
table, allocator = [], _Scripted(range(100, 200))
for n in range(40):
    slot = append_slot(table, n, 8, allocator)
    assert len(table) == n // 8 + 1, f"after token {n} a table of blocks of 8 holds {n // 8 + 1} blocks, got {len(table)}"
    assert slot == table[n // 8] * 8 + n % 8 == int(slot_mapping(table, torch.tensor([n]), 8)[0]), (
        f"token {n}: slot {slot} is not its block's row")
ones = []
assert [append_slot(ones, n, 1, _Scripted([4, 1, 6])) for n in range(1)] == [4]
wide = slot_mapping([3], torch.tensor([0, 15]), 16).tolist()
assert wide == [48, 63], f"block_size 16, table [3]: expected [48, 63], got {wide}"
for bad in (lambda: append_slot([1], 5, 4, _Scripted([2])), lambda: append_slot([], 3, 4, _Scripted([2])),
            lambda: slot_mapping([1, 2], torch.tensor([8]), 4), lambda: slot_mapping([1], torch.tensor([-1]), 4)):
    try:
        bad()
    except ValueError:
        pass
    else:
        raise AssertionError("a table that does not hold ceil(num_tokens / block_size) blocks, or a position outside "
                             "the table, must raise ValueError")
### END HIDDEN TESTS''')

TESTS["test_write_paged"] = (2, r'''"""write_paged: each new token's key and value land in its slot, and nowhere else."""
torch.manual_seed(0)
k_pool, v_pool = torch.full((6, 4, 2, 3), float("nan")), torch.full((6, 4, 2, 3), float("nan"))
k, v = torch.randn(5, 2, 3), torch.randn(5, 2, 3)
slots = torch.tensor([17, 3, 22, 4, 9])
write_paged(k_pool, v_pool, k, v, slots)
flat_k, flat_v = k_pool.view(24, 2, 3), v_pool.view(24, 2, 3)
assert torch.equal(flat_k[slots], k) and torch.equal(flat_v[slots], v), (
    "slot s is row s of the pool seen as (num_blocks * block_size, H_kv, D): token i's key goes to row slots[i]")
untouched = torch.ones(24, dtype=torch.bool)
untouched[slots] = False
assert flat_k[untouched].isnan().all() and flat_v[untouched].isnan().all(), "write_paged wrote outside the given slots"
print("write_paged: visible checks passed.")
### BEGIN HIDDEN TESTS
k_pool, v_pool = torch.zeros(3, 8, 4, 2, dtype=torch.float64), torch.zeros(3, 8, 4, 2, dtype=torch.float64)
order = torch.randperm(24)[:11]
k, v = torch.randn(11, 4, 2, dtype=torch.float64), torch.randn(11, 4, 2, dtype=torch.float64)
write_paged(k_pool, v_pool, k, v, order)
assert torch.equal(k_pool.view(24, 4, 2)[order], k) and torch.equal(v_pool.view(24, 4, 2)[order], v), (
    "eleven tokens in random slots of a float64 pool of 3 blocks of 8")
before = k_pool.clone()
for bad in (lambda: write_paged(k_pool, v_pool, k[:, :3], v[:, :3], order),
            lambda: write_paged(k_pool, v_pool, k.float(), v.float(), order),
            lambda: write_paged(k_pool, v_pool, k[:2], v[:2], torch.tensor([5, 24])),
            lambda: write_paged(k_pool, v_pool, k[:1], v[:1], torch.tensor([-1]))):
    try:
        bad()
    except ValueError:
        pass
    else:
        raise AssertionError("keys of the wrong shape or dtype, or a slot outside the pool, must raise ValueError")
assert torch.equal(k_pool, before), "a refused write must leave the pool as it was"
### END HIDDEN TESTS''')

TESTS["test_gather_paged"] = (3, r'''"""gather_paged against contiguous keys, and paged_attention against torch's attention, with shuffled blocks."""
import torch.nn.functional as F

def _paged_batch(lens, n_kv_heads, d_head, block_size, num_blocks, dtype=torch.float64, seed=0):
    """Contiguous keys and values per sequence, and the same in a NaN-filled pool of shuffled blocks."""
    g = torch.Generator().manual_seed(seed)
    k_pool = torch.full((num_blocks, block_size, n_kv_heads, d_head), float("nan"), dtype=dtype)
    v_pool = k_pool.clone()
    physical = torch.randperm(num_blocks, generator=g).tolist()
    max_blocks = max(-(-n // block_size) for n in lens)
    block_tables = torch.full((len(lens), max_blocks), -1, dtype=torch.long)
    keys, values = [], []
    for b, n in enumerate(lens):
        k, v = (torch.randn(n, n_kv_heads, d_head, generator=g, dtype=dtype) for _ in range(2))
        for i in range(-(-n // block_size)):
            block_tables[b, i] = physical.pop()
            rows = slice(i * block_size, min(n, (i + 1) * block_size))
            k_pool[block_tables[b, i], :rows.stop - rows.start] = k[rows]
            v_pool[block_tables[b, i], :rows.stop - rows.start] = v[rows]
        keys.append(k)
        values.append(v)
    return k_pool, v_pool, block_tables, torch.tensor(lens), keys, values

k_pool, v_pool, tables, lens, keys, values = _paged_batch([5, 1, 8, 9], n_kv_heads=2, d_head=3, block_size=4, num_blocks=12)
gathered = gather_paged(k_pool, tables, lens)
assert tuple(gathered.shape) == (4, 2, 9, 3), (
    f"expected (B, H_kv, max(context_lens), D) = (4, 2, 9, 3), got {tuple(gathered.shape)}: read each sequence's "
    f"context_lens tokens, not whole blocks")
for b, k in enumerate(keys):
    n = k.shape[0]
    assert torch.equal(gathered[b, :, 9 - n:], k.transpose(0, 1)), f"sequence {b}: its {n} keys, in order, end the row"
    assert torch.equal(gathered[b, :, :9 - n], torch.zeros(2, 9 - n, 3, dtype=k.dtype)), (
        f"sequence {b}: the {9 - n} columns before its keys are zeros (never a stale or NaN slot)")
q = torch.randn(4, 6, 1, 3, dtype=torch.float64)
z = paged_attention(q, k_pool, v_pool, tables, lens)
for b, (k, v) in enumerate(zip(keys, values)):
    want = F.scaled_dot_product_attention(q[b:b + 1], k.transpose(0, 1)[None], v.transpose(0, 1)[None], enable_gqa=True)
    assert torch.allclose(z[b:b + 1], want, rtol=1e-12, atol=1e-12), (
        f"sequence {b}: paged attention differs from torch's attention on its contiguous keys and values")
print("gather_paged: visible checks passed.")
### BEGIN HIDDEN TESTS
for group, block_size in ((1, 16), (3, 8), (8, 16)):
    lens = [1, block_size, block_size + 1, 3 * block_size - 2]
    k_pool, v_pool, tables, lens_t, keys, values = _paged_batch(lens, 2, 8, block_size, 20, seed=group)
    q = torch.randn(len(lens), 2 * group, 1, 8, dtype=torch.float64)
    z = paged_attention(q, k_pool, v_pool, tables, lens_t)
    assert not z.isnan().any(), f"NaN from an unused slot reached the output (group {group}, block_size {block_size})"
    for b, (k, v) in enumerate(zip(keys, values)):
        want = F.scaled_dot_product_attention(q[b:b + 1], k.permute(1, 0, 2)[None], v.permute(1, 0, 2)[None],
                                              enable_gqa=True)
        assert torch.allclose(z[b:b + 1], want, rtol=1e-12, atol=1e-12), (
            f"length {lens[b]}, block_size {block_size}, {group} query heads per KV head: wrong attention")
k_pool, v_pool, tables, lens_t, keys, _ = _paged_batch([6], 1, 4, 4, 3, dtype=torch.float32)
assert gather_paged(k_pool, tables, lens_t).dtype == torch.float32, "the gather keeps the pool's dtype"
for bad in (lambda: gather_paged(k_pool, tables, torch.tensor([9])), lambda: gather_paged(k_pool, tables, torch.tensor([0])),
            lambda: gather_paged(k_pool, torch.tensor([[0, 5]]), torch.tensor([6]))):
    try:
        bad()
    except ValueError:
        pass
    else:
        raise AssertionError("a length beyond the table, a length of 0, or a table entry outside the pool must raise "
                             "ValueError")
### END HIDDEN TESTS''')

TESTS["test_copy_on_write"] = (2, r'''"""fork shares every block; copy_on_write gives a writer its own copy of a shared last block, and only then."""
from collections import defaultdict

class _Counts:
    """A stand-in allocator: reference counts, and new blocks taken from a given list."""
    def __init__(self, free_ids, held=()):
        self.ref_counts, self.free_ids = defaultdict(int), list(free_ids)
        for block in held:
            self.ref_counts[block] = 1
    def allocate(self):
        block = self.free_ids.pop(0)
        self.ref_counts[block] = 1
        return block
    def share(self, block):
        self.ref_counts[block] += 1
    def free(self, block):
        self.ref_counts[block] -= 1

allocator = _Counts([10, 11], held=[4, 6])
parent = [4, 6]                                   # 6 tokens in blocks of 4: block 6 holds 2 of its 4
child = fork(parent, allocator)
assert child == [4, 6] and child is not parent, "the child's table is a new list holding the parent's blocks"
assert allocator.ref_counts[4] == allocator.ref_counts[6] == 2, "after a fork each block has one more holder"
copied = copy_on_write(child, 6, 4, allocator)
assert copied == (6, 10), (
    f"token 6 goes into block 6, which the parent also holds: the child must get a new block (10) and copy block "
    f"6 into it, so copy_on_write returns (6, 10); got {copied} (writing into the shared block corrupts the parent)")
assert child == [4, 10] and parent == [4, 6], f"only the writer's table changes: child {child}, parent {parent}"
assert allocator.ref_counts[6] == 1 and allocator.ref_counts[10] == 1, "the copied block loses the writer as a holder"
assert copy_on_write(parent, 6, 4, allocator) is None, "block 6 is the parent's alone now: nothing to copy"
assert copy_on_write(fork(parent, allocator), 8, 4, allocator) is None, (
    "token 8 opens a new block: nothing shared is written, so nothing is copied")
print("fork and copy_on_write: visible checks passed.")
### BEGIN HIDDEN TESTS
allocator = _Counts(range(20, 30), held=[1, 2, 3])
family = [[1, 2, 3]]
for _ in range(3):
    family.append(fork(family[0], allocator))
assert allocator.ref_counts[3] == 4, "four tables hold block 3"
copies = [copy_on_write(table, 9, 4, allocator) for table in family]
assert copies[:3] == [(3, 20), (3, 21), (3, 22)] and copies[3] is None, (
    f"four tables write token 9 into shared block 3: the first three copy it and the last one keeps it, got {copies}")
assert [t[-1] for t in family] == [20, 21, 22, 3] and allocator.ref_counts[3] == 1
assert all(t[:2] == [1, 2] for t in family) and allocator.ref_counts[1] == 4, "full blocks stay shared"
assert fork([], allocator) == [], "a table with no blocks forks into an empty one"
### END HIDDEN TESTS''')

TESTS["test_prefix_cache"] = (2, r'''"""cache_full_blocks enters full blocks only, under chained hashes; match_prefix finds the longest cached prefix."""
class _Cache:
    """A stand-in allocator: the prefix cache's dictionaries, and a record of revived blocks."""
    def __init__(self):
        self.cached, self.block_hashes, self.block_tokens, self.revived = {}, {}, {}, []
    def revive(self, block):
        self.revived.append(block)

prefix = _Cache()
tokens = list(range(100, 110))                    # 10 tokens in blocks of 4: two full blocks and a partial one
cache_full_blocks(tokens, [5, 8, 2], 4, prefix)
first = block_hash(None, tuple(tokens[:4]))
second = block_hash(first, tuple(tokens[4:8]))
entered = sorted(prefix.cached.values())
assert entered == [5, 8], (
    f"10 tokens fill blocks 5 and 8 of table [5, 8, 2]; expected those two entered, got {entered}: a partial block "
    f"must not be entered (its contents change as its sequence grows)")
assert prefix.cached == {first: 5, second: 8}, (
    "block 8's hash must chain block 5's: block_hash(hash of block 5, its tokens), and block 5's block_hash(None, ...)")
assert prefix.block_tokens == {5: tuple(tokens[:4]), 8: tuple(tokens[4:8])} and prefix.block_hashes == {5: first, 8: second}
hit = match_prefix(tokens[:8] + [7, 7], 4, prefix)
assert hit == [5, 8] and prefix.revived == [5, 8], f"a prompt that starts with the same 8 tokens reuses blocks 5 and 8, got {hit}"
assert match_prefix(tokens[:4] + [0, 0, 0, 0, 3], 4, prefix) == [5], "the second block differs: only the first is reused"
assert match_prefix(tokens[4:8] + [1], 4, prefix) == [], (
    "tokens 104-107 at the start of a prompt are not the cached block 8, whose hash chains block 5's")
assert match_prefix(tokens[:8], 4, prefix) == [5], (
    "the block holding the prompt's last token is never reused: that token's logits must be computed")
print("the prefix cache: visible checks passed.")
### BEGIN HIDDEN TESTS
prefix = _Cache()
grown = list(range(50, 63))
cache_full_blocks(grown[:6], [3, 4], 4, prefix)
assert list(prefix.block_hashes) == [3], "6 tokens fill one block of 4"
cache_full_blocks(grown, [3, 4, 9, 1], 4, prefix)
h = [block_hash(None, tuple(grown[:4]))]
for i in (1, 2):
    h.append(block_hash(h[-1], tuple(grown[4 * i:4 * i + 4])))
assert prefix.cached == {h[0]: 3, h[1]: 4, h[2]: 9}, "as the sequence grows, each block is entered once it is full"
prefix.block_tokens[4] = (0, 0, 0, 0)             # as if another block's tokens had the same hash
assert match_prefix(grown, 4, prefix) == [3], "a hash hit whose tokens differ is a collision, not a match"
assert match_prefix([50], 4, prefix) == [] and match_prefix([], 4, prefix) == []
### END HIDDEN TESTS''')

TESTS["test_schedule"] = (3, r'''"""schedule: admit and prefill, else decode; preempt the newest when blocks run out; never over-commit."""
from types import SimpleNamespace

class _Manager:
    """A stand-in block manager that counts blocks and places none."""
    def __init__(self, num_free, block_size=4):
        self.allocator, self.block_size, self.held = SimpleNamespace(num_free=num_free), block_size, {}
    def blocks_for(self, n):
        return -(-n // self.block_size)
    def can_allocate(self, seq, reserve=0):
        return self.blocks_for(len(seq.token_ids)) + reserve <= self.allocator.num_free
    def allocate(self, seq):
        need = self.blocks_for(len(seq.token_ids))
        assert need <= self.allocator.num_free, f"sequence {seq.seq_id} was allocated without room"
        self.allocator.num_free -= need
        self.held[seq.seq_id], seq.num_cached = need, len(seq.token_ids)
    def blocks_to_append(self, seq):
        return int(seq.num_cached % self.block_size == 0)
    def can_append(self, seq):
        return self.blocks_to_append(seq) <= self.allocator.num_free
    def append(self, seq):
        need = self.blocks_to_append(seq)
        assert need <= self.allocator.num_free, f"sequence {seq.seq_id} got a slot without a free block"
        self.allocator.num_free -= need
        self.held[seq.seq_id] += need
        seq.num_cached += 1
    def free(self, seq):
        self.allocator.num_free += self.held.pop(seq.seq_id)
        seq.num_cached = 0

def _seqs(*lengths):
    return [Sequence(i, [1] * n, n, 50) for i, n in enumerate(lengths)]

manager, (s0, s1, s2) = _Manager(20), _seqs(5, 6, 3)
waiting, running = deque([s0, s1, s2]), []
step = schedule(waiting, running, manager, max_num_seqs=2, max_num_batched_tokens=100)
assert step.kind == "prefill" and step.seqs == [s0, s1], f"admit the oldest two (max_num_seqs 2), got {step.kind} {[s.seq_id for s in step.seqs]}"
assert list(waiting) == [s2] and running == [s0, s1], "admitted sequences leave waiting for the end of running"
for seq in running:
    seq.token_ids.append(7)                       # the token each prefill sampled
step = schedule(waiting, running, manager, max_num_seqs=2, max_num_batched_tokens=100)
assert step.kind == "decode" and step.seqs == [s0, s1] and not step.preempted, "with no room to admit, every running sequence decodes"

manager, (old, new) = _Manager(4), _seqs(4, 4)    # each holds one full block; a decode step needs one more each
manager.allocate(old)
manager.allocate(new)
manager.allocator.num_free = 1
waiting, running = deque(), [old, new]
for seq in running:
    seq.token_ids.append(7)
step = schedule(waiting, running, manager, max_num_seqs=8, max_num_batched_tokens=100)
assert step.seqs == [old] and step.preempted == [new], (
    f"one free block for two sequences: the oldest decodes and the newest is preempted; got decode "
    f"{[s.seq_id for s in step.seqs]}, preempted {[s.seq_id for s in step.preempted]}")
assert running == [old] and list(waiting) == [new] and new.num_cached == 0, (
    "a preempted sequence is freed and goes back to the front of waiting, to be recomputed")
print("schedule: visible checks passed.")
### BEGIN HIDDEN TESTS
manager, (a, b, c) = _Manager(3), _seqs(4, 4, 4)
manager.allocate(a)
waiting, running = deque([b, c]), [a]
a.token_ids.append(7)
step = schedule(waiting, running, manager, max_num_seqs=8, max_num_batched_tokens=100)
assert step.kind == "prefill" and step.seqs == [b], (
    "2 free blocks: b (1 block) fits beside the block a's next token needs; c would take that block")
manager, (a, b, c) = _Manager(2), _seqs(4, 4, 4)
manager.allocate(a)
manager.allocate(b)
waiting, running = deque([c]), [a, b]
for seq in running:
    seq.token_ids.append(7)
free_before, held_before = manager.allocator.num_free, dict(manager.held)
manager.allocator.num_free = 1
try:
    schedule(waiting, running, manager, max_num_seqs=8, max_num_batched_tokens=100, preemption=False)
except OutOfBlocks:
    pass
else:
    raise AssertionError("two sequences need a block, one is free and preemption is off: raise OutOfBlocks")
assert running == [a, b] and list(waiting) == [c] and manager.held == held_before and a.num_cached == 4, (
    "OutOfBlocks must leave every queue and table as it was")
manager, seqs = _Manager(100), _seqs(30, 30, 50, 5)
waiting, running = deque(seqs), []
assert schedule(waiting, running, manager, 8, 64).seqs == seqs[:2], "30 + 30 tokens fit a budget of 64, a third does not"
assert schedule(waiting, [], manager, 8, 40).seqs == [seqs[2]], "one prompt longer than the budget still runs alone"
manager, (x, y, z) = _Manager(1), _seqs(4, 4, 4)
for seq in (x, y, z):
    manager.allocator.num_free += 1
    manager.allocate(seq)
    seq.token_ids.append(7)
manager.allocator.num_free = 0
waiting, running = deque(), [x, y, z]
step = schedule(waiting, running, manager, 8, 100)
assert step.preempted == [z, y] and step.seqs == [x] and list(waiting) == [y, z], (
    f"no free block: z then y are preempted for x, and waiting keeps their order (y before z), got "
    f"{[s.seq_id for s in waiting]}")
### END HIDDEN TESTS''')
