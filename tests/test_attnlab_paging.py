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
from attnlab.serving.block_manager import BlockManager, Sequence
from attnlab.serving.engine import Engine
from attnlab.serving.paged_kv import gather_paged, paged_attention, write_paged


class Shadow:
    """What the pool holds, slot by slot, as (position, token): the engine's writes, replayed without tensors."""

    def __init__(self, manager: BlockManager):
        self.manager, self.slots = manager, {}

    def write(self, seq: Sequence, first_position: int) -> None:
        bs = self.manager.block_size
        for source, destination in self.manager.copies:              # copy-on-write first, as the engine does
            for offset in range(bs):
                if source * bs + offset in self.slots:
                    self.slots[destination * bs + offset] = self.slots[source * bs + offset]
        self.manager.copies.clear()
        for position, slot in zip(range(first_position, seq.num_cached), seq.new_slots):
            block = slot // bs
            assert self.manager.allocator.ref_counts[block] == 1, f"a write into block {block}, which is shared"
            assert seq.block_table[position // bs] == block, "a slot outside the sequence's own block"
            self.slots[slot] = (position, seq.token_ids[position])


def check_invariants(manager: BlockManager, live: list[Sequence], shadow: Shadow) -> None:
    allocator, bs = manager.allocator, manager.block_size
    holders = [0] * allocator.num_blocks
    for seq in live:
        assert len(seq.block_table) == -(-seq.num_cached // bs)
        for block in seq.block_table:
            holders[block] += 1
        for position in range(seq.num_cached):                      # every sequence reads its own tokens back
            slot = seq.block_table[position // bs] * bs + position % bs
            assert shadow.slots.get(slot) == (position, seq.token_ids[position]), f"sequence {seq.seq_id} lost a token"
    assert allocator.ref_counts == holders, "a reference count differs from the number of tables holding the block"
    assert set(allocator.free_ids) == {b for b, n in enumerate(holders) if n == 0}, "free blocks are not the unheld ones"
    assert allocator.num_free + sum(n > 0 for n in holders) == allocator.num_blocks
    for block_hash, block in allocator.cached.items():
        assert allocator.block_hashes[block] == block_hash, "the prefix cache's two maps disagree"


def test_random_operations_keep_every_invariant():
    """10^5 operations: new prompts (with shared prefixes, so prefix hits), appends (copy-on-write after a fork),
    forks, frees and preemptions, on a pool small enough that cached blocks are evicted."""
    rng = random.Random(0)
    manager = BlockManager(num_blocks=48, block_size=4)
    shadow, live, next_id = Shadow(manager), [], 0
    prefixes = [[rng.randrange(6) for _ in range(rng.randint(1, 14))] for _ in range(5)]
    counts = dict.fromkeys(("allocate", "append", "fork", "free", "preempt", "prefix hit", "copy"), 0)
    evictions_before = 0
    for _ in range(100_000):
        op = rng.random()
        if op < 0.25 or not live:
            prompt = rng.choice(prefixes) + [rng.randrange(6) for _ in range(rng.randint(1, 6))]
            seq = Sequence(next_id, prompt, len(prompt), 10**6)
            next_id += 1
            if manager.can_allocate(seq):
                manager.allocate(seq)
                hit = len(seq.token_ids) - len(seq.new_slots)
                counts["prefix hit"] += hit > 0
                shadow.write(seq, hit)
                manager.cache_blocks(seq)
                live.append(seq)
                counts["allocate"] += 1
        elif op < 0.75:
            seq = rng.choice(live)
            seq.token_ids.append(rng.randrange(6))
            if manager.can_append(seq):
                counts["copy"] += manager.blocks_to_append(seq) and seq.num_cached % manager.block_size != 0
                manager.append(seq)
                shadow.write(seq, seq.num_cached - 1)
                manager.cache_blocks(seq)
                counts["append"] += 1
            else:                                              # no block: preempt it, as the scheduler would
                manager.free(seq)
                live.remove(seq)
                counts["preempt"] += 1
        elif op < 0.85:
            parent = rng.choice(live)
            child = Sequence(next_id, list(parent.token_ids[:parent.num_cached]), parent.prompt_len, 10**6)
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


@pytest.mark.parametrize("num_blocks,prefix_caching", [(200, True), (200, False), (14, True), (12, False)])
@pytest.mark.parametrize("make_model", [tiny_llama, tiny_mla], ids=["gqa", "mla"])
def test_engine_outputs_equal_generating_each_request_alone(num_blocks, prefix_caching, make_model):
    model = make_model()
    engine = Engine(model, num_blocks=num_blocks, block_size=4, max_num_seqs=6, prefix_caching=prefix_caching)
    reqs = requests()
    ids = [engine.add_request(p, n, eos_id=3)[0] for p, n in reqs]
    outputs = engine.run()
    for (prompt, n), i in zip(reqs, ids):
        assert outputs[i] == alone(model, prompt, n, eos_id=3), f"request {i} differs from generating it alone"
    if num_blocks < 20:
        assert engine.stats.preemptions > 0, "the small pool was meant to force preemption"
    if prefix_caching and num_blocks == 200:
        assert engine.stats.prefill_tokens < sum(len(p) for p, _ in reqs), "the shared system prompt was not reused"
    assert engine.manager.allocator.num_free == num_blocks, "blocks leaked"


def test_parallel_samples_share_the_prompt_and_equal_sampling_alone():
    model = tiny_llama()
    prompt = list(range(1, 23))                                       # 22 tokens: 5 blocks of 4, the last partial
    engine = Engine(model, num_blocks=60, block_size=4)
    ids = engine.add_request(prompt, 6, n=4, temperature=1.0, seed=7)
    outputs = engine.run()
    for i, seq_id in enumerate(ids):
        want = generate(model, torch.tensor([prompt]), 6, temperature=1.0,
                        generator=torch.Generator().manual_seed(7 + i)).tokens[0, len(prompt):].tolist()
        assert outputs[seq_id] == want, f"sample {i} differs from sampling it alone with its seed"
    assert len({tuple(o) for o in outputs.values()}) > 1, "the samples should differ"
    assert engine.stats.peak_blocks < 4 * 7, "four samples of 28 tokens held their own copies of the prompt"


def test_bad_input_is_refused_and_nothing_is_corrupted():
    model = tiny_llama()
    with pytest.raises(ValueError, match="power of two"):
        Engine(model, num_blocks=10, block_size=3)
    engine = Engine(model, num_blocks=10, block_size=4)
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.add_request([1] * 70, 20)
    with pytest.raises(ValueError, match="blocks"):
        engine.add_request([1] * 30, 20)                              # 50 tokens: 13 blocks, the pool has 10
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request([1, 50], 2)
    first = engine.add_request([1, 2, 3], 4)[0]
    engine.step()
    seq = engine.running[0]
    seq.block_table[0] = next(iter(engine.manager.allocator.free_ids))   # a table pointing at a free block
    with pytest.raises(ValueError, match="free"):
        engine.step()
    strict = Engine(model, num_blocks=4, block_size=4, preemption=False)
    for start in (5, 20):                                            # different prompts: no block is shared
        strict.add_request(list(range(start, start + 8)), 8)
    with pytest.raises(OutOfBlocks, match="preemption is off"):
        strict.run()
    held = sorted(b for s in strict.running for b in s.block_table)
    assert len(held) == len(set(held)) == 4 and strict.manager.allocator.num_free == 0, "the refusal changed the tables"
    assert first == 0
