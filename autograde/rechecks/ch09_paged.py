"""Re-checks for chapter 9 (see autograde/rechecks/__init__.py). Each probe drives the student's function through
a seeded random run of operations in the sandbox; the trusted grader runs the same code on the course's
attnlab.serving and compares every recorded number. The stand-ins a probe needs (allocators, a block manager)
are written in the probe, so that each exercise is re-checked on its own."""
import torch

from autograde.rechecks import Probe

STAND_INS = '''
import torch
from collections import defaultdict, deque
from types import SimpleNamespace
class _Scripted:
    def __init__(self, ids):
        self.ids = list(ids)
    def allocate(self):
        return self.ids.pop(0)
class _Counts:
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
class _Reviver:
    def __init__(self):
        self.revived = []
    def revive(self, block):
        self.revived.append(block)
def _tensor(values):
    return torch.tensor([float(v) for v in values], dtype=torch.float64)
'''

ALLOCATOR_CODE = STAND_INS + '''
ops, picks = inputs["ops"].tolist(), inputs["picks"].tolist()
pool, record = BlockAllocator(12), []
for op, pick in zip(ops, picks):
    held = [b for b in range(12) if pool.ref_counts[b]]
    try:
        if op == 0:
            record.append(pool.allocate())
        elif op == 1 and held:
            pool.share(held[pick % len(held)])
        elif op == 2 and held:
            pool.free(held[pick % len(held)])
        elif op == 3 and not pool.ref_counts[pick % 12]:
            pool.free(pick % 12)                        # a free block: must raise ValueError
    except OutOfBlocks:
        record.append(-1)
    except ValueError:
        record.append(-2)
    record += [pool.num_free, *pool.ref_counts]
result = [_tensor(record)]
'''

TABLE_CODE = STAND_INS + '''
result = []
for block_size in (1, 4, 16):
    table, slots = [], []
    allocator = _Scripted(inputs["blocks"].tolist())
    for n in range(int(inputs["length"])):
        slots.append(append_slot(table, n, block_size, allocator))
    result += [_tensor(table), _tensor(slots)]
    result.append(slot_mapping(table, inputs["positions"] % (len(table) * block_size), block_size).double())
'''

WRITE_CODE = '''
k_pool, v_pool = inputs["k_pool"].clone(), inputs["v_pool"].clone()
write_paged(k_pool, v_pool, inputs["k"], inputs["v"], inputs["slots"])
refused = 0.0
try:                                                # slot -1, nano-vllm's padding mark: refused, the pool unchanged
    write_paged(k_pool, v_pool, inputs["k"][:1], inputs["v"][:1], inputs["slots"][:1] * 0 - 1)
except ValueError:
    refused = 1.0
result = [k_pool, v_pool, torch.tensor([refused], dtype=torch.float64)]
'''

GATHER_CODE = '''
args = (inputs["block_tables"], inputs["context_lens"])
result = [gather_paged(inputs["k_pool"], *args),
          paged_attention(inputs["q"], inputs["k_pool"], inputs["v_pool"], *args),
          torch.tensor([float(gather_paged(inputs["k_pool"].float(), *args).dtype == torch.float32)])]
'''

COW_CODE = STAND_INS + '''
allocator = _Counts(range(100, 200), held=range(8))
tables, record = [list(range(8))], []
lengths = [29]                                      # tokens of each table, blocks of 4
for op, pick in zip(inputs["ops"].tolist(), inputs["picks"].tolist()):
    i = pick % len(tables)
    if op == 0:
        tables.append(fork(tables[i], allocator))
        lengths.append(lengths[i])
    else:
        copied = copy_on_write(tables[i], lengths[i], 4, allocator)
        record += [-1, -1] if copied is None else list(copied)
        if lengths[i] % 4 == 0:
            tables[i].append(allocator.allocate())
        lengths[i] += 1
    record += [len(tables)] + [b for t in tables for b in t] + [allocator.ref_counts[b] for b in range(8)]
result = [_tensor(record)]
'''

PREFIX_CODE = STAND_INS + '''
prefix, reviver, record = PrefixCache(), _Reviver(), []
tokens = inputs["tokens"].tolist()
for n, start in zip(inputs["lengths"].tolist(), inputs["starts"].tolist()):
    prompt = tokens[start:start + n]
    record += [-3, *prefix.match_prefix(prompt, 4, reviver)]
    prefix.cache_full_blocks(prompt, list(range(len(record), len(record) + len(prompt) // 4 + 1)), 4)
    record += [-4, *sorted(prefix.block_hashes), -5, *reviver.revived]
result = [_tensor(record)]
'''

SCHEDULE_CODE = STAND_INS + '''
class _Manager:
    def __init__(self, num_free, block_size=4):
        self.allocator, self.block_size = SimpleNamespace(num_free=num_free), block_size
        self.taken, self.shared = {}, {}
    def blocks_for(self, n):
        return -(-n // self.block_size)
    def allocate(self, seq):
        if seq.seq_id in self.taken:
            raise RuntimeError("allocated twice")
        seq.num_computed, self.taken[seq.seq_id], self.shared[seq.seq_id] = 0, 0, 0
    def blocks_needed(self, seq, n):
        return self.blocks_for(seq.num_computed + n) - self.taken[seq.seq_id] - self.shared[seq.seq_id]
    def allocate_slots(self, seq, n):
        need = self.blocks_needed(seq, n)
        if need > self.allocator.num_free:
            raise RuntimeError("slots without room")
        self.allocator.num_free -= need
        self.taken[seq.seq_id] += need
    def free(self, seq):
        self.allocator.num_free += self.taken.pop(seq.seq_id)
        self.shared.pop(seq.seq_id)
        seq.num_computed = seq.num_scheduled = 0
    def fork(self, parent, child):
        self.taken[child.seq_id] = 0
        self.shared[child.seq_id] = self.taken[parent.seq_id] + self.shared[parent.seq_id]
        child.num_computed = parent.num_computed
record = []
for num_free, budget, lengths in zip(inputs["num_free"].tolist(), inputs["budget"].tolist(), inputs["lengths"].tolist()):
    manager = _Manager(num_free)          # too few blocks for all: sequences are preempted and recomputed
    scheduler = Scheduler(manager, max_num_seqs=4, max_num_batched_tokens=budget)
    for i, n in enumerate(lengths):       # every other request asks for 3 samples, which count as 3 rows
        samples = 3 if i % 2 else 1
        params = SamplingParams(max_new_tokens=6, temperature=1.0 if samples > 1 else 0.0, n=samples)
        seq = Sequence(10 * i, [1] * n, params)
        seq.forks = [Sequence(10 * i + j, [1] * n, params, sample=j) for j in range(1, samples)]
        scheduler.add(seq)
    for _ in range(300):
        if not scheduler.has_unfinished():
            break
        out = scheduler.schedule()
        record += [-1, *[x for s in out.seqs for x in (s.seq_id, s.num_scheduled)], -3,
                   *[s.seq_id for s in out.preempted], -4, manager.allocator.num_free, scheduler.num_rows]
        for seq in out.seqs:
            seq.num_computed += seq.num_scheduled
            if seq.num_computed == seq.num_tokens:
                for sample in [seq] + scheduler.fork(seq):
                    sample.token_ids.append(7)
        for seq in [s for s in scheduler.running if s.finished]:
            scheduler.finish(seq)
for num_free, blocks in zip(inputs["crowded_free"].tolist(), inputs["crowded_blocks"].tolist()):
    manager = _Manager(100)               # four running sequences with full blocks: each next token needs a block
    scheduler = Scheduler(manager, max_num_seqs=8, max_num_batched_tokens=64)
    for i, n in enumerate(blocks):
        seq = Sequence(i, [1] * (4 * n), SamplingParams(max_new_tokens=10))
        manager.allocate(seq)
        manager.allocate_slots(seq, seq.num_tokens)
        seq.num_computed = seq.num_tokens
        seq.token_ids.append(7)
        scheduler.running.append(seq)
    manager.allocator.num_free = num_free
    out = scheduler.schedule()
    record += [-5, *[s.seq_id for s in out.seqs], -6, *[s.seq_id for s in out.preempted],
               *[s.seq_id for s in scheduler.waiting]]
manager = _Manager(4)
scheduler = Scheduler(manager, max_num_seqs=4, max_num_batched_tokens=24, preemption=False)
for i in range(3):
    seq = Sequence(i, [1] * 4, SamplingParams(max_new_tokens=10))
    manager.allocate(seq)
    manager.allocate_slots(seq, 4)
    seq.num_computed = 4
    seq.token_ids.append(7)
    scheduler.running.append(seq)
try:                                      # three sequences need a block each, one is free, preemption is off
    scheduler.schedule()
    record.append(0)
except OutOfBlocks:
    record.append(1)
record += [manager.allocator.num_free, len(scheduler.running), *[seq.num_scheduled for seq in scheduler.running]]
result = [_tensor(record)]
'''


def _course(code: str):
    """The reference: the probe's own code run by the trusted grader on the course's attnlab.serving."""
    def reference(inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        from attnlab.serving import block_allocator, block_manager, block_table, copy_on_write, paged_kv, prefix_cache
        from attnlab.serving import scheduler, sequence
        scope = {"inputs": inputs}
        for module in (block_allocator, block_table, paged_kv, copy_on_write, prefix_cache, sequence, block_manager,
                       scheduler):
            scope.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        exec(compile(code, "<course reference>", "exec"), scope)
        return tuple(scope["result"])
    return reference


def _allocator_inputs(g):
    return {"ops": torch.randint(0, 4, (300,), generator=g), "picks": torch.randint(0, 1000, (300,), generator=g)}


def _table_inputs(g):
    return {"blocks": torch.randperm(200, generator=g), "length": torch.randint(17, 60, (1,), generator=g),
            "positions": torch.randint(0, 10_000, (25,), generator=g)}


def _write_inputs(g):
    pool = torch.full((5, 8, 3, 4), -999.0, dtype=torch.float64)     # finite: NaN never equals itself
    return {"k_pool": pool, "v_pool": pool.clone(), "slots": torch.randperm(40, generator=g)[:13],
            "k": torch.randn(13, 3, 4, generator=g, dtype=torch.float64),
            "v": torch.randn(13, 3, 4, generator=g, dtype=torch.float64)}


def _gather_inputs(g):
    block_size, lens = 8, torch.tensor([1, 8, 9, 23, 5])
    physical = torch.randperm(20, generator=g)
    tables = physical[:15].reshape(5, 3)
    k_pool = torch.full((20, block_size, 2, 4), float("nan"), dtype=torch.float64)
    v_pool = k_pool.clone()
    for b, n in enumerate(lens.tolist()):
        for p in range(n):
            k_pool[tables[b, p // block_size], p % block_size] = torch.randn(2, 4, generator=g, dtype=torch.float64)
            v_pool[tables[b, p // block_size], p % block_size] = torch.randn(2, 4, generator=g, dtype=torch.float64)
    return {"k_pool": k_pool, "v_pool": v_pool, "block_tables": tables, "context_lens": lens,
            "q": torch.randn(5, 6, 1, 4, generator=g, dtype=torch.float64)}


def _cow_inputs(g):
    return {"ops": torch.randint(0, 2, (40,), generator=g), "picks": torch.randint(0, 1000, (40,), generator=g)}


def _prefix_inputs(g):
    base = torch.randint(0, 5, (8,), generator=g)
    tokens = torch.cat([base, base, torch.randint(0, 5, (40,), generator=g)])   # repeats: hits at two places
    return {"tokens": tokens, "lengths": torch.randint(1, 30, (12,), generator=g),
            "starts": torch.randint(0, 9, (12,), generator=g)}


def _schedule_inputs(g):
    # Twelve runs, on pools of 5 to 12 blocks: preemption with several candidates is then all but certain.
    return {"num_free": torch.tensor([5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 11, 12]),
            "budget": torch.randint(4, 30, (12,), generator=g), "lengths": torch.randint(1, 14, (12, 7), generator=g),
            "crowded_free": torch.randint(0, 3, (4,), generator=g), "crowded_blocks": torch.randint(1, 4, (4, 4), generator=g)}


def _probe(inputs, code, rtol=0.0, atol=0.0, refusals=()):
    return Probe(inputs=inputs, code=code, reference=_course(code), rtol=rtol, atol=atol, refusals=refusals)


PROBES = {
    # freeing or sharing a free block, or one outside the pool of 12
    "test_block_allocator": _probe(_allocator_inputs, ALLOCATOR_CODE, refusals=(
        "BlockAllocator(3).free(0)", "BlockAllocator(3).share(1)", "pool.free(12)", "pool.share(-1)")),
    # a table without ceil(num_tokens / block_size) blocks, a position outside the table
    "test_block_table": _probe(_table_inputs, TABLE_CODE, refusals=(
        "append_slot([1], 5, 4, _Scripted([2]))", "append_slot([], 3, 4, _Scripted([2]))",
        "slot_mapping([1, 2], torch.tensor([8]), 4)", "slot_mapping([1], torch.tensor([-1]), 4)")),
    # keys of the wrong shape or dtype, a slot outside the pool of 40 (the pool must stay as it is: output 0 and 1)
    "test_write_paged": _probe(_write_inputs, WRITE_CODE, refusals=(
        "write_paged(k_pool, v_pool, inputs['k'][:, :2], inputs['v'][:, :2], inputs['slots'])",
        "write_paged(k_pool, v_pool, inputs['k'].float(), inputs['v'].float(), inputs['slots'])",
        "write_paged(k_pool, v_pool, inputs['k'][:2], inputs['v'][:2], torch.tensor([5, 40]))")),
    # a length beyond the table (3 blocks of 8), a length of 0, a table entry outside the pool of 20
    "test_gather_paged": _probe(_gather_inputs, GATHER_CODE, rtol=1e-12, atol=1e-12, refusals=(
        "gather_paged(inputs['k_pool'], inputs['block_tables'][:1], torch.tensor([25]))",
        "gather_paged(inputs['k_pool'], inputs['block_tables'][:1], torch.tensor([0]))",
        "gather_paged(inputs['k_pool'], torch.tensor([[0, 20]]), torch.tensor([9]))")),
    "test_copy_on_write": _probe(_cow_inputs, COW_CODE),
    "test_prefix_cache": _probe(_prefix_inputs, PREFIX_CODE),
    "test_schedule": _probe(_schedule_inputs, SCHEDULE_CODE),
}
