"""Chapter 9's attnlab.serving: a random driver of 10^5 block-manager operations that checks every invariant
after each one; paged attention against torch's attention on contiguous keys and values; the engine against
generating each request alone (with preemption, prefix sharing, parallel sampling and MLA); and bad input."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from attnlab.decoding.generation import generate
from attnlab.models.llama import Llama, LlamaConfig
from attnlab.models.mla import MLAConfig, MLAModel
from attnlab.serving.block_allocator import OutOfBlocks
from attnlab.serving.block_manager import BlockManager
from attnlab.serving.block_table import slot_mapping
from attnlab.serving.sequence import SamplingParams, Sequence
from attnlab.serving.engine import Engine
from attnlab.serving.paged_kv import gather_paged, paged_attention, write_paged
from tests.engine_probes import host_syncs, host_syncs_per_decode_step


class Shadow:
    """What the pool holds, slot by slot, as (position, token): the engine's writes, replayed without tensors."""

    def __init__(self, manager: BlockManager):
        self.manager, self.slots = manager, {}

    def write(self, seq: Sequence, num_new: int) -> None:
        """Positions num_computed .. num_computed + num_new - 1 of seq, after manager.allocate_slots."""
        bs = self.manager.block_size
        for source, destination in self.manager.copies:              # copy-on-write first, as the engine does
            for offset in range(bs):
                if source * bs + offset in self.slots:
                    self.slots[destination * bs + offset] = self.slots[source * bs + offset]
        self.manager.copies.clear()
        positions = range(seq.num_computed, seq.num_computed + num_new)
        for position, slot in zip(positions, slot_mapping(seq.block_table, torch.tensor(positions), bs).tolist()):
            block = slot // bs
            assert self.manager.allocator.ref_counts[block] == 1, f"a write into block {block}, which is shared"
            self.slots[slot] = (position, seq.token_ids[position])
        seq.num_computed += num_new


def check_invariants(manager: BlockManager, live: list[Sequence], shadow: Shadow) -> None:
    allocator, bs = manager.allocator, manager.block_size
    holders = [0] * allocator.num_blocks
    for seq in live:
        assert len(seq.block_table) == -(-seq.num_computed // bs)
        for block in seq.block_table:
            holders[block] += 1
        for position in range(seq.num_computed):                    # every sequence reads its own tokens back
            slot = seq.block_table[position // bs] * bs + position % bs
            assert shadow.slots.get(slot) == (position, seq.token_ids[position]), f"sequence {seq.seq_id} lost a token"
    assert allocator.ref_counts == holders, "a reference count differs from the number of tables holding the block"
    assert set(allocator.free_ids) == {b for b, n in enumerate(holders) if n == 0}, "free blocks are not the unheld ones"
    assert allocator.num_free + sum(n > 0 for n in holders) == allocator.num_blocks
    for block_hash, block in manager.prefix_cache.cached.items():
        assert manager.prefix_cache.block_hashes[block] == block_hash, "the prefix cache's two maps disagree"


def _snapshot(manager: BlockManager, seqs: list[Sequence]):
    a = manager.allocator
    return (list(a.ref_counts), list(a.free_ids), dict(manager.prefix_cache.cached), list(manager.copies),
            [(list(s.block_table), s.num_computed) for s in seqs])


def test_random_operations_keep_every_invariant():
    """10^5 operations: new prompts (with shared prefixes, so prefix hits) prefilled in chunks, appends
    (copy-on-write after a fork), forks, frees and preemptions, on a pool small enough that cached blocks are
    evicted. A call that raises must change nothing."""
    rng = random.Random(0)
    params = SamplingParams(max_new_tokens=10**6)
    manager = BlockManager(num_blocks=48, block_size=4)
    shadow, live, next_id = Shadow(manager), [], 0
    prefixes = [[rng.randrange(6) for _ in range(rng.randint(1, 14))] for _ in range(5)]
    counts = dict.fromkeys(("allocate", "append", "fork", "free", "preempt", "prefix hit", "copy", "refused"), 0)
    for _ in range(100_000):
        op = rng.random()
        if op < 0.25 or not live:
            prompt = rng.choice(prefixes) + [rng.randrange(6) for _ in range(rng.randint(1, 6))]
            seq = Sequence(next_id, prompt, params)
            next_id += 1
            manager.allocate(seq)
            counts["prefix hit"] += seq.num_computed > 0
            chunk = rng.randint(1, seq.num_tokens - seq.num_computed)      # a first chunk of the prompt
            before = _snapshot(manager, live + [seq])
            try:
                manager.allocate_slots(seq, chunk)
            except OutOfBlocks:
                assert _snapshot(manager, live + [seq]) == before, "a refused allocate_slots changed something"
                manager.free(seq)
                counts["refused"] += 1
            else:
                shadow.write(seq, chunk)
                live.append(seq)
                counts["allocate"] += 1
        elif op < 0.75:
            seq = rng.choice(live)
            if seq.num_computed == seq.num_tokens:
                seq.token_ids.append(rng.randrange(6))
            num_new = rng.randint(1, seq.num_tokens - seq.num_computed)
            if manager.blocks_needed(seq, num_new) <= manager.allocator.num_free:
                counts["copy"] += seq.num_computed % manager.block_size != 0 and \
                    manager.allocator.ref_counts[seq.block_table[-1]] > 1
                manager.allocate_slots(seq, num_new)
                shadow.write(seq, num_new)
                counts["append"] += 1
            else:                                              # no block: preempt it, as the scheduler would
                manager.free(seq)
                live.remove(seq)
                counts["preempt"] += 1
        elif op < 0.85:
            parent = rng.choice(live)
            child = Sequence(next_id, list(parent.token_ids[:parent.num_computed]), params)
            next_id += 1
            manager.fork(parent, child)
            live.append(child)
            counts["fork"] += 1
        else:
            seq = live.pop(rng.randrange(len(live)))
            manager.free(seq)
            counts["free"] += 1
        check_invariants(manager, live, shadow)
    for seq in live:
        manager.free(seq)
    assert manager.allocator.num_free == 48 and not any(manager.allocator.ref_counts), "blocks leaked"
    assert min(counts.values()) > 100, f"every kind of operation must be exercised often: {counts}"


def test_block_manager_calls_that_raise_change_nothing():
    """The three calls a random-operation driver once caught raising after changing state."""
    params = SamplingParams()
    manager = BlockManager(num_blocks=6, block_size=4)
    a, b = Sequence(0, list(range(10)), params), Sequence(1, list(range(20, 26)), params)
    for seq in (a, b):
        manager.allocate(seq)
        manager.allocate_slots(seq, seq.num_tokens)                  # a: 3 blocks, b: 2 blocks
        seq.num_computed = seq.num_tokens
    before = _snapshot(manager, [a, b])
    a.token_ids += list(range(100, 109))                             # 9 new tokens to compute
    with pytest.raises(OutOfBlocks):
        manager.allocate_slots(a, 9)                                 # 3 more blocks, 1 is free
    assert _snapshot(manager, [a, b]) == before, "OutOfBlocks left blocks in the table"
    manager.allocator.free(a.block_table[-1])                        # a's last block freed behind its back
    before = _snapshot(manager, [a, b])
    with pytest.raises(ValueError, match="free"):
        manager.allocate_slots(a, 3)                                 # would open a block: it must not leak
    assert _snapshot(manager, [a, b]) == before, "a refused allocate_slots took a block"
    with pytest.raises(ValueError, match="free"):
        manager.free(a)                                              # a freed block at the end of the table
    assert _snapshot(manager, [a, b]) == before, "a refused free released blocks"
    manager.allocator.share(b.block_table[1])                        # hold it twice, then free the middle one
    manager.allocator.free(b.block_table[0])
    before = _snapshot(manager, [b])
    with pytest.raises(ValueError, match="free"):
        manager.free(b)
    assert _snapshot(manager, [b]) == before, "a refused free released the blocks after the freed one"


def test_fork_and_allocate_slots_refuse_bad_calls_before_changing_anything():
    """Random testing found them: fork of a table holding a freed block raised only after sharing the blocks
    before it (their counts leaked); allocate_slots accepted more tokens than the sequence has left to compute
    (blocks reserved for tokens that do not exist) and a negative count."""
    params = SamplingParams()
    manager = BlockManager(num_blocks=8, block_size=4)
    parent = Sequence(0, list(range(10)), params)
    manager.allocate(parent)
    manager.allocate_slots(parent, parent.num_tokens)                # 3 blocks
    parent.num_computed = parent.num_tokens
    manager.allocator.free(parent.block_table[-1])                   # its last block freed behind its back
    child = Sequence(1, list(parent.token_ids), params)
    before = _snapshot(manager, [parent, child])
    with pytest.raises(ValueError, match="free"):
        manager.fork(parent, child)
    assert _snapshot(manager, [parent, child]) == before, "a refused fork changed the reference counts"

    seq = Sequence(2, list(range(100, 106)), params)                 # no prefix hit: all 6 tokens to compute
    manager.allocate(seq)
    before = _snapshot(manager, [seq])
    for bad in (7, -1):
        with pytest.raises(ValueError, match="allocate_slots"):
            manager.allocate_slots(seq, bad)                         # 6 tokens to compute: 7 and -1 are not
        assert _snapshot(manager, [seq]) == before, f"a refused allocate_slots(seq, {bad}) changed the blocks"
    manager.allocate_slots(seq, 6)                                   # every token: allowed
    seq.num_computed = 6
    with pytest.raises(ValueError, match="allocate_slots"):
        manager.allocate_slots(seq, 1)                               # nothing left to compute


def _paged(lens, n_kv_heads, d_head, block_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // block_size) for n in lens) + 3
    k_pool = torch.full((num_blocks, block_size, n_kv_heads, d_head), float("nan"), dtype=torch.float64)
    v_pool = k_pool.clone()
    physical = torch.randperm(num_blocks, generator=g)
    tables = torch.full((len(lens), max(-(-n // block_size) for n in lens)), -1, dtype=torch.long)
    keys, values, used = [], [], 0
    for b, n in enumerate(lens):
        blocks = -(-n // block_size)
        tables[b, :blocks] = physical[used:used + blocks]
        used += blocks
        k, v = (torch.randn(n, n_kv_heads, d_head, generator=g, dtype=torch.float64) for _ in range(2))
        slots = tables[b, torch.arange(n) // block_size] * block_size + torch.arange(n) % block_size
        write_paged(k_pool, v_pool, k, v, slots)
        keys.append(k)
        values.append(v)
    return k_pool, v_pool, tables, torch.tensor(lens), keys, values


@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("block_size", [1, 16])
def test_paged_attention_equals_contiguous_attention(group, block_size):
    """Physical blocks shuffled, every unused slot NaN, lengths 1, block_size and block_size + 1 in one batch."""
    lens = [1, block_size, block_size + 1, 2 * block_size + 3]
    k_pool, v_pool, tables, lens_t, keys, values = _paged(lens, 2, 8, block_size, seed=group)
    q = torch.randn(len(lens), 2 * group, 1, 8, dtype=torch.float64)
    z = paged_attention(q, k_pool, v_pool, tables, lens_t)
    for b, (k, v) in enumerate(zip(keys, values)):
        want = F.scaled_dot_product_attention(q[b:b + 1], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                              enable_gqa=True)
        torch.testing.assert_close(z[b:b + 1], want, rtol=1e-12, atol=1e-12)
    gathered = gather_paged(k_pool, tables, lens_t)
    assert not gathered.isnan().any(), "a NaN slot was read"


def tiny_llama(n_kv_heads: int = 2, seed: int = 0) -> Llama:
    torch.manual_seed(seed)
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, d_ff=64, n_layers=2,
                              max_seq_len=80)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.3)
    return model


def tiny_mla() -> MLAModel:
    torch.manual_seed(1)
    model = MLAModel(MLAConfig(vocab_size=50, d_model=32, n_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
                               qk_rope_head_dim=4, v_head_dim=6, d_ff=40, n_layers=2, max_seq_len=80)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.3)
    return model


def requests(seed: int = 0, count: int = 12):
    """Mixed lengths; every other prompt starts with the same 9-token system prompt."""
    rng = random.Random(seed)
    system = [rng.randrange(50) for _ in range(9)]
    out = []
    for i in range(count):
        tail = [rng.randrange(50) for _ in range(rng.randint(1, 14))]
        out.append((system + tail if i % 2 else tail, rng.randint(1, 24)))
    return out


def alone(model, prompt, n, eos_id=None):
    tokens = generate(model, torch.tensor([prompt]), n, eos_id=eos_id).tokens[0, len(prompt):].tolist()
    return tokens[:tokens.index(eos_id) + 1] if eos_id in tokens else tokens


@pytest.mark.parametrize("num_blocks,prefix_caching,budget", [(200, True, 512), (200, False, 512), (14, True, 512),
                                                          (12, False, 512), (200, True, 8), (14, True, 4)])
@pytest.mark.parametrize("make_model", [tiny_llama, tiny_mla], ids=["gqa", "mla"])
def test_engine_outputs_equal_generating_each_request_alone(num_blocks, prefix_caching, budget, make_model):
    """With preemption (small pools), prefix hits and chunked prefill (a budget of 4 or 8 tokens a step); every
    unused slot of every pool NaN, so that a read of anything but a sequence's own tokens would show."""
    model = make_model()
    engine = Engine(model, num_blocks=num_blocks, block_size=4, max_num_seqs=6, prefix_caching=prefix_caching,
                    max_num_batched_tokens=budget)
    for cache in engine.runner.caches:
        cache.k_pool.fill_(float("nan"))
        cache.v_pool.fill_(float("nan"))
    reqs = requests()
    ids = [engine.add_request(p, n, eos_id=3)[0] for p, n in reqs]
    steps = []
    outputs = engine.run(lambda e, emitted: steps.append(e.scheduler.num_rows))
    for (prompt, n), i in zip(reqs, ids):
        assert outputs[i] == alone(model, prompt, n, eos_id=3), f"request {i} differs from generating it alone"
    if num_blocks < 20:
        assert engine.stats.preemptions > 0, "the small pool was meant to force preemption"
    if prefix_caching and num_blocks == 200:
        assert engine.stats.prefill_tokens < sum(len(p) for p, _ in reqs), "the shared system prompt was not reused"
    assert engine.scheduler.num_free_blocks == num_blocks, "blocks leaked"
    assert max(steps) <= 6


def test_a_step_packs_decodes_and_prefill_chunks_within_the_budget():
    """Chunked prefill: a prompt longer than the budget is prefilled over several steps, each of which also
    decodes the running sequences; no step computes more than max_num_batched_tokens tokens."""
    model = tiny_llama()
    engine = Engine(model, num_blocks=64, block_size=4, max_num_seqs=4, max_num_batched_tokens=8)
    first = engine.add_request(list(range(1, 4)), 12)[0]
    long = engine.add_request(list(range(5, 35)), 3)[0]              # 30 tokens: at least 4 chunks of <= 8
    seen, schedule = [], engine.scheduler.schedule

    def schedule_and_record():
        batch = schedule()
        seen.append([(s.seq_id, s.num_scheduled) for s in batch.seqs])
        assert batch.num_tokens <= 8, f"a step of {batch.num_tokens} tokens, over the budget of 8"
        return batch

    engine.scheduler.schedule = schedule_and_record
    engine.run()
    mixed = [step for step in seen if {i for i, _ in step} == {first, long}]
    assert len(mixed) >= 4 and all(dict(step)[first] == 1 for step in mixed[1:]), (
        f"the long prompt's chunks should share steps with the first request's decodes: {seen}")
    outputs = {i: s.token_ids[s.prompt_len:] for i, s in engine.finished.items()}
    assert outputs[long] == alone(model, list(range(5, 35)), 3)
    assert outputs[first] == alone(model, list(range(1, 4)), 12)


def test_forks_count_toward_max_num_seqs_in_every_step():
    model = tiny_llama()
    engine = Engine(model, num_blocks=80, block_size=4, max_num_seqs=4)
    with pytest.raises(ValueError, match="max_num_seqs"):
        engine.add_request([1, 2, 3], 4, n=6, temperature=1.0)
    assert not engine.has_unfinished(), "a refused request was queued"
    for seed in range(3):
        engine.add_request([1, 2, 3 + seed], 6, n=3, temperature=1.0, seed=seed)
    rows = []
    while engine.has_unfinished():
        engine.step()
        rows.append(len(engine.running))
    assert max(rows) <= 4, f"rows running per step: {rows}, over max_num_seqs = 4"


def test_host_synchronisations_do_not_grow_with_the_number_of_layers():
    """torch's profiler counts the operations that read a tensor back to the host (item(), nonzero, boolean
    indexing). A decode step may do a few once, never a few per layer (since its slots are computed from integers,
    it does none)."""
    x = torch.arange(4.0)
    assert host_syncs(lambda: (x.sum().item(), x[x > 1])) == 2, "the count itself is broken"
    two, thirty = host_syncs_per_decode_step(2), host_syncs_per_decode_step(30)
    assert thirty == two, f"host synchronisations per decode step: {two} with 2 layers, {thirty} with 30"


def sampled_alone(model, prompt: list[int], max_new_tokens: int, **params) -> list[int]:
    """One request sampled in an engine of its own: the reference for a seeded sample (its noise depends on its seed
    and its steps only, tests/test_sampling_noise.py), which sharing, forks and preemption must not change."""
    engine = Engine(model, num_blocks=2 * (len(prompt) + max_new_tokens), block_size=4)
    seq_id, = engine.add_request(prompt, max_new_tokens, **params)
    return engine.run()[seq_id]


def test_parallel_samples_share_the_prompt_and_equal_sampling_alone():
    model = tiny_llama()
    prompt = list(range(1, 23))                                       # 22 tokens: 5 blocks of 4, the last partial
    engine = Engine(model, num_blocks=60, block_size=4)
    ids = engine.add_request(prompt, 6, n=4, temperature=1.0, seed=7)
    outputs = engine.run()
    for i, seq_id in enumerate(ids):
        want = sampled_alone(model, prompt, 6, temperature=1.0, seed=7 + i)
        assert outputs[seq_id] == want, f"sample {i} differs from sampling it alone with its seed"
    assert len({tuple(o) for o in outputs.values()}) > 1, "the samples should differ"
    assert engine.stats.peak_blocks < 4 * 7, "four samples of 28 tokens held their own copies of the prompt"


def test_bad_input_is_refused_and_nothing_is_corrupted():
    model = tiny_llama()
    with pytest.raises(ValueError, match="power of two"):
        Engine(model, num_blocks=10, block_size=3)
    with pytest.raises(ValueError, match="smaller than one block"):
        Engine(model, num_blocks=10, block_size=8, max_num_batched_tokens=4)
    engine = Engine(model, num_blocks=10, block_size=4)
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.add_request([1] * 70, 20)
    with pytest.raises(ValueError, match="blocks"):
        engine.add_request([1] * 30, 20)                              # 50 tokens: 13 blocks, the pool has 10
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request([1, 50], 2)
    with pytest.raises(ValueError, match="temperature"):
        engine.add_request([1, 2], 2, n=2)
    assert not engine.has_unfinished(), "a refused request was queued"
    first = engine.add_request([1, 2, 3], 4)[0]
    engine.step()
    seq = engine.running[0]
    seq.block_table[0] = next(iter(engine.scheduler.manager.allocator.free_ids))   # a table pointing at a free block
    with pytest.raises(ValueError, match="free"):
        engine.step()
    strict = Engine(model, num_blocks=5, block_size=4, preemption=False)
    for start in (5, 20):                     # 7 tokens each, no block shared: both run, then both need a block
        strict.add_request(list(range(start, start + 7)), 8)
    with pytest.raises(OutOfBlocks, match="preemption is off"):
        strict.run()
    held = sorted(b for s in strict.running for b in s.block_table)
    assert len(strict.running) == 2 and all(s.num_computed == 8 for s in strict.running), "the refusal changed a sequence"
    assert len(held) == len(set(held)) == 4 and strict.scheduler.num_free_blocks == 1, "the refusal changed the tables"
    assert first == 0


def test_deepseek_configs_mla_does_not_model_are_refused():
    from transformers import DeepseekV3Config
    from attnlab.models.mla import mla_config_from_deepseek
    base = DeepseekV3Config(vocab_size=50, hidden_size=32, num_attention_heads=4, kv_lora_rank=16, q_lora_rank=None,
                            qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, intermediate_size=40,
                            num_hidden_layers=2, first_k_dense_replace=2).to_dict()
    mla_config_from_deepseek(base)
    with pytest.raises(ValueError, match="rope_interleave"):
        mla_config_from_deepseek(base | {"rope_interleave": False})
    with pytest.raises(ValueError, match="attention_bias"):
        mla_config_from_deepseek(base | {"attention_bias": True})


def test_paged_attention_on_bf16_pools_accumulates_in_float32():
    """FlashMLA's check, on chapter 9's reference: bf16 pools and queries against a float32 reference on the same
    bf16 values; a bf16 softmax and bf16 sums fail its cosine bound in most cases."""
    k_pool, v_pool, tables, lens_t, keys, values = _paged([7, 16, 40, 65], 2, 64, 16, seed=3)
    k_pool, v_pool = k_pool.nan_to_num(0).bfloat16(), v_pool.nan_to_num(0).bfloat16()
    q = torch.randn(4, 8, 1, 64, dtype=torch.float64).bfloat16()
    z = paged_attention(q, k_pool, v_pool, tables, lens_t)
    assert z.dtype == torch.bfloat16
    want = paged_attention(q.float(), k_pool.float(), v_pool.float(), tables, lens_t)
    cosine = F.cosine_similarity(z.double().flatten(), want.double().flatten(), dim=0)
    assert 1 - cosine < 5e-6, f"cosine distance {1 - cosine:.2e} against float32 on the same bf16 inputs"


def test_host_work_per_decode_step_does_not_grow_with_the_context():
    """A decode's slot, position and length are plain integers, its block manager looks at its last block only, and a
    block is hashed once, when it fills: the host's calls over 16 decode steps (each sequence fills one block in
    them) are the same for contexts of 64 and 512 tokens, and grow with the rows alone. Before, every decode called
    slot_mapping (a dozen torch ops) and the manager checked every block of every table, every step."""
    from tests.engine_probes import host_calls_per_decode_steps
    short, long = host_calls_per_decode_steps(8, 64), host_calls_per_decode_steps(8, 512)
    assert long == short, f"host calls in 16 decode steps of 8 rows: {short} at 64 tokens, {long} at 512"
    assert host_calls_per_decode_steps(16, 64) < 2.2 * short, "the host's work must grow with the rows, linearly"


def test_the_model_runner_reads_the_sequences_and_changes_none():
    """The three boxes (nano-vllm's): the scheduler's next_step hands the runner a step with the copies its
    copy-on-writes promised; the runner copies, runs and samples, and leaves every sequence as it found it; only the
    scheduler's postprocess changes them. Driven by hand, the steps give the engine's own tokens and leak no block."""
    model = tiny_llama()

    def requests(engine):
        return [engine.add_request(list(range(1 + i, 12 + i)), 6, n=2 if i == 1 else 1,
                                   temperature=1.0 if i == 1 else 0.0, seed=i) for i in range(3)]

    engine = Engine(model, num_blocks=30, block_size=4, max_num_seqs=4, max_num_batched_tokens=8)
    requests(engine)
    copies = 0
    while engine.has_unfinished():
        batch = engine.scheduler.next_step()
        assert not engine.scheduler.manager.copies, "the copies travel in the step, not in the block manager"
        copies += len(batch.copies)
        state = lambda: [(s.seq_id, list(s.token_ids), list(s.block_table), s.num_computed, s.num_scheduled,  # noqa: E731
                          [f.seq_id for f in s.forks]) for s in batch.seqs]
        before = state()
        token_ids = engine.runner.run(batch)
        assert state() == before, "the model runner changed a sequence"
        for seq in engine.scheduler.postprocess(batch, token_ids):
            engine.finished[seq.seq_id] = seq
    assert copies > 0, "the forks' copy-on-write was not exercised"
    assert engine.scheduler.num_free_blocks == 30, "blocks leaked"
    by_hand = {i: s.token_ids[s.prompt_len:] for i, s in engine.finished.items()}
    stepped = Engine(model, num_blocks=30, block_size=4, max_num_seqs=4, max_num_batched_tokens=8)
    requests(stepped)
    assert stepped.run() == dict(sorted(by_hand.items()))


REFERENCES: dict[tuple, list[int]] = {}        # each request's output alone, shared by both schedulings


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["step by step", "host one step ahead"])
def test_a_thousand_random_requests_give_each_its_own_tokens_and_leak_no_block(async_scheduling):
    """1,000 requests arriving while others run: prompts sharing prefixes (prefix hits), greedy ones with and without
    EOS, sampled ones with n = 1..3 forks and top_p, on a pool small enough to preempt and a budget small enough to
    chunk prompts. Each output equals generating the request alone (greedy: chapter 5's generate; sampled: an engine
    of its own, each sample with its own seed), and when the last request leaves, every block is free and the
    prefix cache's maps agree. With the host scheduling one step ahead, a sequence that draws its EOS runs one more
    step, whose token is dropped: the outputs must not change."""
    model = tiny_llama(seed=3)
    rng = random.Random(1)
    engine = Engine(model, num_blocks=24, block_size=4, max_num_seqs=8, max_num_batched_tokens=16,
                    async_scheduling=async_scheduling)
    systems = [[rng.randrange(50) for _ in range(rng.randint(4, 9))] for _ in range(3)]
    pending, asked = 1000, {}
    while pending or engine.has_unfinished():
        for _ in range(min(pending, rng.choice([0, 0, 1, 2, 5]))):
            prompt = rng.choice(systems + [[]]) + [rng.randrange(50) for _ in range(rng.randint(1, 8))]
            n, eos = (rng.choice([1, 2, 3]), rng.choice([None, 3])) if rng.random() < 0.4 else (1, rng.choice([None, 3]))
            params = dict(max_new_tokens=rng.randint(1, 9), eos_id=eos, n=n, seed=rng.randrange(10**6),
                          temperature=0.0 if n == 1 and rng.random() < 0.5 else 0.8,
                          top_p=rng.choice([None, 0.9]))
            for sample, seq_id in enumerate(engine.add_request(prompt, **params)):
                asked[seq_id] = (prompt, params, sample)
            pending -= 1
        engine.step()
    assert engine.stats.preemptions > 0 and engine.stats.peak_rows == 8, "the pool and the rows were meant to be full"
    assert set(engine.finished) == set(asked), "a request was lost"
    for seq_id, (prompt, p, sample) in asked.items():
        key = (tuple(prompt), sample, *sorted(p.items()))
        if key not in REFERENCES:
            if p["temperature"]:                # sample i of a request with seed s: seed s + i, alone
                REFERENCES[key] = sampled_alone(model, prompt, p["max_new_tokens"], eos_id=p["eos_id"],
                                                temperature=p["temperature"], top_p=p["top_p"], seed=p["seed"] + sample)
            else:
                REFERENCES[key] = alone(model, prompt, p["max_new_tokens"], eos_id=p["eos_id"])
        want = REFERENCES[key]
        got = engine.finished[seq_id].token_ids[len(prompt):]
        assert got == want, f"sequence {seq_id} ({p}, sample {sample}): {got}, alone {want}"
    manager = engine.scheduler.manager
    assert engine.scheduler.num_free_blocks == 24 and not any(manager.allocator.ref_counts), "blocks leaked"
    assert all(manager.prefix_cache.block_hashes[b] == h for h, b in manager.prefix_cache.cached.items())


def test_the_host_one_step_ahead_gives_the_step_by_step_engines_tokens():
    """The same requests through both schedulings: greedy and seeded, with EOS (token 6, the one this model draws
    most), forks, preemption (14 blocks) and chunked prompts (8 tokens a step). Same outputs; the tokens each step
    reports are those outputs, in order, the dropped ones left out; each sequence that stopped at its EOS before
    max_new_tokens cost at most one decode more; no block leaks."""
    model = tiny_llama()
    runs = {}
    for async_scheduling in (False, True):
        engine = Engine(model, num_blocks=14, block_size=4, max_num_seqs=6, max_num_batched_tokens=8,
                        async_scheduling=async_scheduling)
        for i, (prompt, n) in enumerate(requests()):
            engine.add_request(prompt, n, eos_id=6, n=3 if i % 4 == 1 else 1, temperature=0.9 if i % 4 == 1 else 0.0,
                               seed=i)
        reported: dict[int, list[int]] = {}
        outputs = engine.run(lambda e, emitted: [reported.setdefault(i, []).append(t) for i, t in emitted])
        assert reported == outputs, "a step reported a token that is not in the output, or missed one"
        assert engine.scheduler.num_free_blocks == 14 and engine.in_flight is None, "blocks leaked"
        runs[async_scheduling] = outputs, engine.stats
    (outputs, stats), (ahead, ahead_stats) = runs[False], runs[True]
    assert ahead == outputs
    stopped = sum(o[-1] == 6 for o in outputs.values())
    assert stopped >= 3 and stats.preemptions > 0, "EOS and preemption were meant to happen"
    assert stats.decode_tokens < ahead_stats.decode_tokens <= stats.decode_tokens + stopped
