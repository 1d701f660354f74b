import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.decoding.generation import LanguageModel
from attnlab.decoding.sampling import next_token
from drafts.ch09.cells.block_manager import BlockManager, Sequence
from drafts.ch09.cells.paged_cache import PagedCache, StepLayout
from drafts.ch09.cells.scheduler import Step, schedule

# %% cell engine given
def pool_shapes(config) -> tuple[tuple[int, int], tuple[int, int]]:
    """(heads, dims) of what each token stores per layer, in the keys' slot and the values' slot: K and V of
    n_kv_heads for a Llama-style model (chapter 7), the latent c_kv and the rotary key for MLA (chapter 8)."""
    if hasattr(config, "kv_lora_rank"):
        return (1, config.kv_lora_rank), (config.n_rope_heads, config.qk_rope_head_dim)
    return (config.n_kv_heads, config.d_head), (config.n_kv_heads, config.d_head)


@dataclass
class Sampling:
    temperature: float = 0.0              # 0: greedy
    top_p: float | None = None
    generator: torch.Generator | None = None


@dataclass
class EngineStats:
    steps: int = 0
    prefill_tokens: int = 0               # tokens whose keys and values a prefill computed (prefix hits excluded)
    decode_tokens: int = 0
    preemptions: int = 0
    peak_blocks: int = 0                  # the most blocks held at once
    seconds: float = 0.0


class Engine:
    """Continuous batching on a paged KV cache: requests join and leave between steps while others decode.

    Works with any model of the LanguageModel interface whose caches follow chapter 5's Cache interface: each
    layer gets a PagedCache over its own (num_blocks, block_size, heads, dims) pools."""

    def __init__(self, model: LanguageModel, num_blocks: int, block_size: int = 16, max_num_seqs: int = 32,
                 max_num_batched_tokens: int = 4096, prefix_caching: bool = True, preemption: bool = True):
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(f"max_num_seqs and max_num_batched_tokens must be >= 1, got {max_num_seqs} and "
                             f"{max_num_batched_tokens}")
        self.model, self.config = model, model.config
        self.manager = BlockManager(num_blocks, block_size, prefix_caching)
        self.max_num_seqs, self.max_num_batched_tokens, self.preemption = (max_num_seqs, max_num_batched_tokens,
                                                                           preemption)
        weight = next(model.parameters())
        (k_heads, k_dim), (v_heads, v_dim) = pool_shapes(self.config)
        self.caches = [PagedCache(torch.zeros(num_blocks, block_size, k_heads, k_dim, dtype=weight.dtype),
                                  torch.zeros(num_blocks, block_size, v_heads, v_dim, dtype=weight.dtype))
                       for _ in range(self.config.n_layers)]
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.sampling: dict[int, Sampling] = {}
        self.finished: dict[int, Sequence] = {}
        self.forks: dict[int, list[Sequence]] = {}     # a parallel-sampling request's other samples, until prefill
        self.stats = EngineStats()
        self._next_id = 0

    @property
    def pool_nbytes(self) -> int:
        return sum(cache.nbytes for cache in self.caches)

    def add_request(self, prompt_ids: list[int], max_new_tokens: int, eos_id: int | None = None, n: int = 1,
                    temperature: float = 0.0, top_p: float | None = None, seed: int = 0) -> list[int]:
        """Queue a prompt; n > 1 samples n continuations that share the prompt's blocks. Returns their ids."""
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids or max_new_tokens < 1 or n < 1:
            raise ValueError(f"need a non-empty prompt, max_new_tokens >= 1 and n >= 1; got {len(prompt_ids)} "
                             f"tokens, max_new_tokens = {max_new_tokens}, n = {n}")
        if min(prompt_ids) < 0 or max(prompt_ids) >= self.config.vocab_size:
            raise ValueError(f"token ids must be in 0..{self.config.vocab_size - 1}")
        total = len(prompt_ids) + max_new_tokens
        if total > self.config.max_seq_len:
            raise ValueError(f"a prompt of {len(prompt_ids)} tokens plus {max_new_tokens} new ones exceeds the "
                             f"model's max_seq_len = {self.config.max_seq_len}")
        if self.manager.blocks_for(total) > self.manager.allocator.num_blocks:
            raise ValueError(f"{total} tokens need {self.manager.blocks_for(total)} blocks of "
                             f"{self.manager.block_size}; the pool has {self.manager.allocator.num_blocks}")
        if n > 1 and temperature == 0:
            raise ValueError("n > 1 samples need temperature > 0: greedy samples would all be the same")
        seqs = []
        for i in range(n):
            seq = Sequence(self._next_id, list(prompt_ids), len(prompt_ids), max_new_tokens, eos_id)
            generator = torch.Generator().manual_seed(seed + i) if temperature > 0 else None
            self.sampling[seq.seq_id] = Sampling(temperature, top_p, generator)
            self._next_id += 1
            seqs.append(seq)
        self.waiting.append(seqs[0])
        if n > 1:
            self.forks[seqs[0].seq_id] = seqs[1:]
        return [seq.seq_id for seq in seqs]

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[tuple[int, int]]:
        """One iteration: schedule, run the model once on every scheduled sequence, sample. Returns the
        (sequence id, token) pairs generated."""
        started = time.perf_counter()
        plan = schedule(self.waiting, self.running, self.manager, self.max_num_seqs, self.max_num_batched_tokens,
                        self.preemption)
        self.stats.preemptions += len(plan.preempted)
        self._copy_blocks()
        logits = torch.cat([self._forward(Step(plan.kind, group)) for group in self._groups(plan)])   # (B, vocab)
        held = self.manager.allocator.num_blocks - self.manager.allocator.num_free
        self.stats.peak_blocks = max(self.stats.peak_blocks, held)
        emitted = []
        for row, seq in enumerate(plan.seqs):
            for sample in [seq] + (self.forks.pop(seq.seq_id, []) if plan.kind == "prefill" else []):
                if sample is not seq:                                     # a parallel sample: shares seq's blocks
                    self.manager.fork(seq, sample)
                    self.running.append(sample)
                params = self.sampling[sample.seq_id]
                token = int(next_token(logits[row:row + 1], params.temperature, None, params.top_p,
                                       params.generator))
                sample.token_ids.append(token)
                emitted.append((sample.seq_id, token))
        for seq in list(self.running):
            self.manager.cache_blocks(seq)
            if seq.finished:
                self.manager.free(seq)
                self.running.remove(seq)
                self.finished[seq.seq_id] = seq
        self.stats.steps += 1
        self.stats.seconds += time.perf_counter() - started
        return emitted

    def run(self, on_step: Callable[["Engine", list[tuple[int, int]]], None] | None = None) -> dict[int, list[int]]:
        """Step until every request is finished; {sequence id: its generated tokens}."""
        while self.has_unfinished():
            emitted = self.step()
            if on_step is not None:
                on_step(self, emitted)
        return {i: seq.token_ids[seq.prompt_len:] for i, seq in sorted(self.finished.items())}

    @staticmethod
    def _groups(plan: Step) -> list[list[Sequence]]:
        """The step's rows in forward passes. A batch is padded to its longest row, so prompts of very different
        lengths (say, one whose prefix was cached) are split, in admission order: a prompt's blocks entered in
        the prefix cache are then computed before another prompt reads them."""
        groups: list[list[Sequence]] = []
        for seq in plan.seqs:
            group = groups[-1] if groups else []
            lengths = [len(s.new_slots) for s in group] + [len(seq.new_slots)]
            if group and max(lengths) * len(lengths) > 1.5 * sum(lengths):
                groups.append([seq])
            elif group:
                group.append(seq)
            else:
                groups.append([seq])
        return groups

    def _copy_blocks(self) -> None:
        """Copy-on-write: the block contents the manager promised, in every layer, before anything is written."""
        for source, destination in self.manager.copies:
            for cache in self.caches:
                cache.k_pool[destination] = cache.k_pool[source]
                cache.v_pool[destination] = cache.v_pool[source]
        self.manager.copies.clear()

    @torch.no_grad()
    def _forward(self, plan: Step) -> torch.Tensor:
        """The model on these rows' new tokens, left-padded: (B, t_new) -> the last real position's logits."""
        seqs = plan.seqs
        new_lens = torch.tensor([len(seq.new_slots) for seq in seqs])
        t_new = int(new_lens.max())
        token_ids = torch.zeros(len(seqs), t_new, dtype=torch.long)
        max_blocks = max(len(seq.block_table) for seq in seqs)
        block_tables = torch.zeros(len(seqs), max_blocks, dtype=torch.long)
        for row, seq in enumerate(seqs):
            for block_id in seq.block_table:
                self.manager.allocator.check_held(block_id)     # a table must never point at a free block
            token_ids[row, t_new - len(seq.new_slots):] = torch.tensor(seq.token_ids[-len(seq.new_slots):])
            block_tables[row, :len(seq.block_table)] = torch.tensor(seq.block_table)
        layout = StepLayout(block_tables, torch.tensor([seq.num_cached for seq in seqs]), new_lens,
                            torch.tensor([slot for seq in seqs for slot in seq.new_slots], dtype=torch.long))
        for cache in self.caches:
            cache.layout = layout
        if plan.kind == "prefill":
            self.stats.prefill_tokens += int(new_lens.sum())
        else:
            self.stats.decode_tokens += len(seqs)
        return self.model(token_ids, layout.attention_mask(), self.caches)[:, -1]
