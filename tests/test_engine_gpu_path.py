"""The engine's GPU path, run on a CPU: CUDA-graph buckets and static decode buffers, sampling on the device, step
metadata for the chosen backend only, and one writer per Sequence field. Only capture and replay need CUDA; the
code they capture runs here, and must give the tokens the eager engine gives."""
from __future__ import annotations

import ast

import pytest
import torch
import torch.nn.functional as F

from attnlab.models.llama import Llama, LlamaConfig
from attnlab.models.mla import MLAConfig, MLAModel
from attnlab.serving.cuda_graphs import DecodeBuffers, graph_batch_sizes
from attnlab.serving.engine import Engine
from attnlab.serving.paged_cache import build_step
from attnlab.serving.sequence import SamplingParams, Sequence
from coursekit.layout import REPO_ROOT

SERVING = REPO_ROOT / "attnlab" / "serving"


def sdpa_decode(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                context_lens: torch.Tensor) -> torch.Tensor:
    """A decode kernel written with torch's SDPA, with no read back to the host (as a captured kernel must):
    q (B, H, D), pools (num_blocks, block_size, H_kv, D) -> z (B, H, D)."""
    block_size = k_pool.shape[1]
    position = torch.arange(block_tables.shape[1] * block_size)                       # (S,)
    slots = block_tables.long().clamp(min=0)[:, position // block_size] * block_size + position % block_size
    k, v = (pool.view(-1, *pool.shape[2:])[slots].transpose(1, 2) for pool in (k_pool, v_pool))   # (B, H_kv, S, D)
    mask = (position[None, :] < context_lens[:, None].long())[:, None, None, :]
    z = F.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=mask, enable_gqa=True)
    return z[:, :, 0]


def latent_decode(q_latent: torch.Tensor, q_rope: torch.Tensor, c_pool: torch.Tensor, r_pool: torch.Tensor,
                  block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """The absorbed MLA decode with no read back to the host: q_latent (B, H, d_c), q_rope (B, H, d_r), the latent
    pool (num_blocks, block_size, 1, d_c) and the rotary pool (.., 1, d_r) -> z_latent (B, H, d_c)."""
    block_size = c_pool.shape[1]
    position = torch.arange(block_tables.shape[1] * block_size)
    slots = block_tables.long().clamp(min=0)[:, position // block_size] * block_size + position % block_size
    c, r = (pool.view(-1, pool.shape[-1])[slots] for pool in (c_pool, r_pool))        # (B, S, d)
    scores = (torch.einsum("bhc,bsc->bhs", q_latent, c) + torch.einsum("bhr,bsr->bhs", q_rope, r)) * scale
    scores = scores.masked_fill(~(position[None, :] < context_lens[:, None].long())[:, None, :], float("-inf"))
    return torch.einsum("bhs,bsc->bhc", scores.softmax(dim=-1), c)


def tiny_llama() -> Llama:
    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=2,
                             max_seq_len=96)).eval()


def tiny_mla() -> MLAModel:
    torch.manual_seed(0)
    return MLAModel(MLAConfig(vocab_size=64, d_model=32, n_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
                              qk_rope_head_dim=8, v_head_dim=8, d_ff=64, n_layers=2, max_seq_len=96)).eval()


def serve(model, prompts: list[list[int]], new_tokens: list[int], **engine_args) -> dict[int, list[int]]:
    engine = Engine(model, num_blocks=40, block_size=4, max_num_seqs=6, max_num_batched_tokens=24, **engine_args)
    for prompt, n in zip(prompts, new_tokens):
        engine.add_request(prompt, n)
    outputs = engine.run()
    assert engine.scheduler.num_free_blocks == 40, "blocks leaked"
    return outputs


def test_graph_batch_sizes_are_nano_vllms_buckets():
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(6) == [1, 2, 4, 6]
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert graph_batch_sizes(40) == [1, 2, 4, 8, 16, 32, 40]
    with pytest.raises(ValueError, match="max_num_seqs"):
        graph_batch_sizes(0)


def decode_seqs(lengths: list[int], block_size: int) -> list[Sequence]:
    """Sequences of the given lengths, each one token from the end of its computed tokens, on disjoint blocks."""
    seqs, next_block = [], 0
    for i, length in enumerate(lengths):
        seq = Sequence(i, list(range(1, length + 1)), SamplingParams())
        blocks = -(-length // block_size)
        seq.block_table = list(range(next_block, next_block + blocks))
        next_block += blocks
        seq.num_computed, seq.num_scheduled = length - 1, 1
        seqs.append(seq)
    return seqs


def test_decode_buffers_pad_a_step_to_its_bucket_with_rows_that_touch_only_the_pad_slot():
    block_size, max_blocks, pad_block = 4, 8, 30
    buffers = DecodeBuffers(16, max_blocks, pad_block * block_size, block_size, torch.device("cpu"))
    big = build_step(decode_seqs([9, 3, 17, 5, 6, 2], block_size), block_size, torch.device("cpu"), gather_decodes=False)
    buffers.fill(big, 8)
    small = build_step(decode_seqs([7, 13, 1], block_size), block_size, torch.device("cpu"), gather_decodes=False)
    padded = buffers.fill(small, 4)                    # after a larger step: its rows 3.. must be reset
    assert padded.num_decodes == 4 and padded.token_ids.shape == (1, 4)
    assert padded.token_ids.data_ptr() == buffers.token_ids.data_ptr(), "a captured graph reads the buffers only"
    torch.testing.assert_close(padded.slot_mapping[:3], small.slot_mapping)
    torch.testing.assert_close(padded.context_lens[:3], small.context_lens)
    torch.testing.assert_close(padded.block_tables[:3, :small.block_tables.shape[1]], small.block_tables)
    assert (padded.block_tables[:3, small.block_tables.shape[1]:] == -1).all()
    assert padded.slot_mapping[3] == pad_block * block_size and padded.context_lens[3] == 1
    assert padded.block_tables[3].tolist() == [pad_block] + [-1] * (max_blocks - 1)
    again = buffers.fill(small, 8)                     # the larger bucket pads its own rows, whatever they held
    assert (again.block_tables[3:] == torch.tensor([pad_block] + [-1] * (max_blocks - 1))).all()
    assert (again.slot_mapping[3:] == pad_block * block_size).all() and (again.context_lens[3:] == 1).all()
    with pytest.raises(ValueError, match="decodes and no prefill chunk"):
        buffers.fill(small, 2)


@pytest.mark.parametrize("make_model, kernel", [(tiny_llama, sdpa_decode), (tiny_mla, latent_decode)],
                         ids=["gqa", "mla"])
def test_decode_steps_through_the_graph_buffers_give_the_eager_engines_tokens(make_model, kernel):
    """cuda_graphs=True on a CPU runs every decode-only step through the padded static buffers (the code a graph
    captures), and prefill or mixed steps eagerly; the tokens must equal those of the engine without graphs, also
    with the host one step ahead, as on a GPU (the graphs' inputs then come from the step before, on the device)."""
    model = make_model()
    prompts = [list(range(1, n + 1)) for n in (5, 30, 11, 3, 19, 8, 26)]
    new_tokens = [9, 4, 14, 7, 3, 12, 6]
    eager = serve(model, prompts, new_tokens, attention="torch")
    graphed = serve(model, prompts, new_tokens, attention=kernel, cuda_graphs=True)
    assert graphed == eager
    assert serve(model, prompts, new_tokens, attention=kernel, cuda_graphs=True, async_scheduling=True) == eager


def test_the_graph_path_is_used_for_decode_steps_and_refused_where_it_cannot_work():
    model = tiny_llama()
    engine = Engine(model, num_blocks=40, block_size=4, max_num_seqs=6, attention=sdpa_decode, cuda_graphs=True)
    sizes = []
    run = engine.runner.graphs.run
    engine.runner.graphs.run = lambda step: sizes.append(engine.runner.graphs.size_for(step.num_decodes)) or run(step)
    for n in (3, 5, 7):
        engine.add_request(list(range(1, n + 1)), 5)
    engine.run()
    assert sizes and set(sizes) == {4}, f"three decodes run in the bucket of 4, got {sizes}"
    assert engine.runner.caches[0].k_pool.shape[0] == 41, "one pad block beyond the manager's 40"
    with pytest.raises(ValueError, match="CUDA graphs"):
        Engine(model, num_blocks=40, block_size=4, attention="torch", cuda_graphs=True)
    assert Engine(model, num_blocks=40, block_size=4).runner.graphs is None, "no graphs unless asked for, on a CPU"


def test_seeded_samples_do_not_depend_on_the_batch():
    """A seeded request gets the same tokens alone and beside others, with or without the graph buffers."""
    model = tiny_llama()
    engine = Engine(model, num_blocks=40, block_size=4)
    engine.add_request([5, 6, 7], 10, temperature=0.9, top_p=0.8, seed=11)
    alone = list(engine.run().values())[0]
    crowded = Engine(model, num_blocks=40, block_size=4, attention=sdpa_decode, cuda_graphs=True)
    crowded.add_request([9, 9, 9, 9, 9], 12, temperature=1.0, seed=2)
    ids = crowded.add_request([5, 6, 7], 10, temperature=0.9, top_p=0.8, seed=11)
    crowded.add_request([1, 2], 8)
    assert crowded.run()[ids[0]] == alone


def test_step_metadata_for_a_kernel_leaves_out_the_gather_fields():
    seqs = decode_seqs([1024] * 32, 16)
    gather = build_step(seqs, 16, torch.device("cpu"))
    kernel = build_step(seqs, 16, torch.device("cpu"), gather_decodes=False)
    assert kernel.read_slots is None and kernel.read_mask is None
    for name in ("token_ids", "positions", "slot_mapping", "block_tables", "context_lens", "logits_at"):
        torch.testing.assert_close(getattr(kernel, name), getattr(gather, name), msg=name)
    nbytes = lambda step: sum(t.nbytes for t in vars(step).values() if isinstance(t, torch.Tensor))
    # 32 rows of 64 int32 block ids (8 kB) and a few (32,) vectors, against 32 x 1,024 int64 slots and bools more
    assert nbytes(kernel) < 10_000 < 290_000 < nbytes(gather), (nbytes(kernel), nbytes(gather))
    with pytest.raises(ValueError, match="no read_slots"):
        kernel.gather_decodes(torch.zeros(64, 16, 2, 8))


def test_gathered_keys_are_the_pools_rows_and_zeros_where_a_decode_has_none():
    """torch's decode path reads (num_decodes, H, S, D): each decode's keys from its table's slots, then zeros,
    even where the pool holds NaN (a NaN read there would reach the output through a 0 weight of the values)."""
    lengths, block_size = [9, 3, 17, 1], 4
    seqs = decode_seqs(lengths, block_size)
    pool = torch.randn(sum(-(-n // block_size) for n in lengths) + 2, block_size, 2, 8)
    for seq, n in zip(seqs, lengths):                          # every slot past a sequence's end: NaN
        flat = pool[seq.block_table].view(-1, 2, 8)
        flat[n:] = float("nan")
        pool[seq.block_table] = flat.view(-1, block_size, 2, 8)
    step = build_step(seqs, block_size, torch.device("cpu"))
    rows = step.gather_decodes(pool)                           # (4, 2, S, 8)
    assert rows.shape == (4, 2, max(lengths), 8)
    for b, (seq, n) in enumerate(zip(seqs, lengths)):
        torch.testing.assert_close(rows[b, :, :n], pool[seq.block_table].view(-1, 2, 8)[:n].transpose(0, 1))
        assert (rows[b, :, n:] == 0).all(), f"decode {b}: the places past its {n} keys must be zeros"


@pytest.mark.parametrize("absorb", [False, True])
def test_mla_prefill_attends_for_all_of_a_steps_chunks_in_one_call_as_each_sequence_alone(absorb):
    """PagedLatentCache's prefill: one attention call for every chunk of a step (padded into one batch), equal to
    each sequence attending alone to its contiguous latents with a causal mask. The step mixes two decodes with
    chunks from position 0, after a cached prefix, of one token more than a block, and of two tokens; every slot
    outside the sequences' tokens holds NaN, which a masked place must not carry into the output (through a 0
    weight of the values)."""
    from attnlab.layers.latent_attention import absorbed_latent_attention, naive_latent_attention
    from attnlab.serving.paged_cache import PagedLatentCache

    attend = absorbed_latent_attention if absorb else naive_latent_attention
    block_size, n_heads, d_nope, d_rope, d_c, d_v = 4, 3, 8, 4, 16, 6
    work = [(9, 1), (2, 1), (0, 11), (6, 5), (13, 2)]            # (tokens already cached, tokens this step)
    num_blocks = sum(-(-(o + n) // block_size) for o, n in work) + 3
    # Block 0 is never given out: the places past a context read slot 0 before they are zeroed, so it holds NaN.
    order = (torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(1)) + 1).tolist()
    c_pool = torch.full((num_blocks, block_size, 1, d_c), float("nan"))
    r_pool = torch.full((num_blocks, block_size, 1, d_rope), float("nan"))
    seqs, contexts = [], []
    for i, (offset, size) in enumerate(work):
        seq = Sequence(i, list(range(1, offset + size + 1)), SamplingParams())
        seq.block_table = [order.pop() for _ in range(-(-(offset + size) // block_size))]
        seq.num_computed, seq.num_scheduled = offset, size
        slots = torch.tensor([seq.block_table[p // block_size] * block_size + p % block_size for p in range(offset)])
        latents, rotary = torch.randn(offset + size, 1, d_c), torch.randn(offset + size, 1, d_rope)
        if offset:                                               # the cached prefix is in the pool already
            c_pool.view(-1, 1, d_c)[slots], r_pool.view(-1, 1, d_rope)[slots] = latents[:offset], rotary[:offset]
        seqs.append(seq)
        contexts.append((latents, rotary))
    n = sum(size for _, size in work)
    q_nope, q_rope = torch.randn(1, n_heads, n, d_nope), torch.randn(1, n_heads, n, d_rope)
    new_c = torch.cat([c[o:] for (c, _), (o, _) in zip(contexts, work)]).transpose(0, 1)[None]     # (1, 1, n, d_c)
    new_r = torch.cat([r[o:] for (_, r), (o, _) in zip(contexts, work)]).transpose(0, 1)[None]
    w_ukv = torch.randn(n_heads * (d_nope + d_v), d_c) / d_c ** 0.5
    calls = []

    def counted(*args):
        calls.append(args[0].shape)
        return attend(*args)

    cache = PagedLatentCache(c_pool, r_pool)
    cache.step = build_step(seqs, block_size, torch.device("cpu"), gather_chunks=False)
    got = cache.attend(q_nope, q_rope, new_c, new_r, w_ukv, d_v, None, counted)                    # (1, H, n, d_v)
    assert len(calls) == 2, f"one call for the decodes and one for all three chunks, got {len(calls)}: {calls}"
    assert not got.isnan().any()
    start = 0
    for (offset, size), (latents, rotary) in zip(work, contexts):
        window = slice(start, start + size)
        causal = torch.arange(offset + size)[None, :] <= torch.arange(offset, offset + size)[:, None]
        want = attend(q_nope[:, :, window], q_rope[:, :, window], latents.transpose(0, 1)[None],
                      rotary.transpose(0, 1)[None], w_ukv, d_v, causal)
        torch.testing.assert_close(got[:, :, window], want, rtol=1e-5, atol=1e-5)
        start += size


def test_build_step_refuses_a_decode_after_a_prefill_chunk_and_a_position_past_the_table():
    """The kernels and the layers read a step's decodes as its first num_decodes tokens: a single-token sequence
    after a prefill chunk would be read as part of that chunk, so build_step says so instead of attending wrongly."""
    decode, = decode_seqs([9], 4)
    chunk = Sequence(1, list(range(1, 8)), SamplingParams())
    chunk.block_table, chunk.num_computed, chunk.num_scheduled = [7, 8], 0, 7
    build_step([decode, chunk], 4, torch.device("cpu"))                   # decodes first: fine
    with pytest.raises(ValueError, match="single-token sequences must come first"):
        build_step([chunk, decode], 4, torch.device("cpu"))
    decode.block_table = decode.block_table[:2]                            # position 8 needs a third block
    with pytest.raises(ValueError, match="position 8 is past its 2 blocks of 4"):
        build_step([decode], 4, torch.device("cpu"))


def test_a_graphed_decode_step_reads_nothing_back_but_the_sampled_ids(monkeypatch):
    """Profiled on a CPU: in a decode step through the graph buffers, no operation reads a tensor back to the host
    (item(), bool(), boolean indexing) and one tolist() copies the sampled ids, apart from build_step, which works
    on host tensors before its one copy to the device."""
    import attnlab.serving.model_runner as engine_module

    model = tiny_llama()
    engine = Engine(model, num_blocks=64, block_size=4, max_num_seqs=8, attention=sdpa_decode, cuda_graphs=True)
    for i in range(6):
        engine.add_request([1 + i, 2, 3, 4, 5], 20)
    for _ in range(3):
        engine.step()
    on_host = engine_module.build_step

    def build_step_on_host(*args, **kwargs):
        with torch.profiler.record_function("host: build_step"):
            return on_host(*args, **kwargs)

    monkeypatch.setattr(engine_module, "build_step", build_step_on_host)
    copies, tolist = [], torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: copies.append(self.shape) or tolist(self))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        engine.step()

    def in_build_step(event) -> bool:
        while event is not None:
            if event.name == "host: build_step":
                return True
            event = event.cpu_parent
        return False

    reads = [e.name for e in prof.events() if e.name in (
        "aten::_local_scalar_dense", "aten::nonzero", "aten::item", "aten::is_nonzero") and not in_build_step(e)]
    assert reads == [], reads
    assert copies == [torch.Size([6])], f"one copy back per step, of the 6 sampled ids; got {copies}"


WRITERS = {"block_table": {"BlockManager"}, "num_computed": {"BlockManager"}, "num_scheduled": {"Scheduler"},
           "token_ids": {"Scheduler"}, "forks": {"Scheduler"}}


def test_each_sequence_field_has_one_writer():
    """Outside Sequence's constructor, each field is assigned, augmented or appended to in one class only."""
    found: dict[str, set[str]] = {field: set() for field in WRITERS}
    for path in SERVING.glob("*.py"):
        for top in ast.parse(path.read_text()).body:
            if isinstance(top, ast.ClassDef):
                owner, bodies = top.name, [f for f in top.body if not (top.name == "Sequence" and
                                                                      getattr(f, "name", "") == "__init__")]
            elif isinstance(top, ast.FunctionDef):
                owner, bodies = f"{path.stem}.{top.name}", [top]
            else:
                continue
            for node in (n for body in bodies for n in ast.walk(body)):
                targets = []
                if isinstance(node, ast.Assign):
                    targets = [t for target in node.targets for t in ast.walk(target)]
                elif isinstance(node, ast.AugAssign):
                    targets = [node.target]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                        "append", "extend", "pop", "clear"):
                    targets = [node.func.value]
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr in WRITERS and not (
                            isinstance(target.value, ast.Name) and target.value.id == "self"):
                        found[target.attr].add(owner)
    classes = {field: {w for w in writers if "." not in w} for field, writers in found.items()}
    functions = {field: {w for w in writers if "." in w} for field, writers in found.items()}
    assert classes == WRITERS, classes
    # free functions of the exercises write only through a table the BlockManager hands them, never a Sequence
    assert not any(functions.values()), functions


def test_each_config_describes_its_cache_once_for_new_caches_and_the_paged_pools():
    """CausalLM (chapter 5), Llama (chapter 7) and MLAModel (chapter 8): the contiguous caches of new_caches and
    the engine's paged pools both hold what config.cache_shapes says, and the length check is one and the same."""
    from attnlab.models.causal_lm import CausalLM, CausalLMConfig
    from attnlab.serving.model_runner import new_paged_caches

    gpt = CausalLM(CausalLMConfig(vocab_size=64, d_model=32, n_heads=4, d_ff=64, n_layers=3, max_seq_len=40))
    for model in (gpt, tiny_llama(), tiny_mla()):
        shapes = model.config.cache_shapes
        caches = model.new_caches(2, 10)
        assert len(caches) == shapes.n_layers == model.config.n_layers
        stored = [tensor for tensor in vars(caches[0]).values() if isinstance(tensor, torch.Tensor)]
        assert [(t.shape[1], t.shape[3]) for t in stored] == [shapes.keys, shapes.values]
        assert all(t.shape[0] == 2 and t.shape[2] == 10 for t in stored)
        if model is not gpt:
            paged = new_paged_caches(model.config, 7, 4, torch.float32, torch.device("cpu"))
            assert [tuple(p.shape) for p in (paged[0].k_pool, paged[0].v_pool)] == [(7, 4, *shapes.keys),
                                                                                    (7, 4, *shapes.values)]
            assert type(paged[0]).__name__ == ("PagedLatentCache" if shapes.latent else "PagedCache")
        with pytest.raises(ValueError, match=f"does not fit max_seq_len = {model.config.max_seq_len}"):
            model.new_caches(1, model.config.max_seq_len + 1)
    assert tiny_mla().config.cache_shapes.keys == (1, 16) and tiny_llama().config.cache_shapes.keys == (2, 8)


def test_with_async_scheduling_the_host_launches_a_step_before_reading_the_one_before(monkeypatch):
    """vLLM v1's asynchronous scheduling, as the engine's calls show it: step k + 1 is scheduled and launched, its
    decodes taking step k's tokens on the device, before the host reads step k's tokens; the step-by-step engine
    reads each step before it schedules the next."""
    from attnlab.serving import model_runner
    events = []
    launch, read = model_runner.ModelRunner.launch, model_runner.LaunchedStep.read

    def logged_launch(self, batch, previous=None):
        step = launch(self, batch, previous)
        events.append(("launch", id(step), previous and id(previous)))
        return step

    def logged_read(self):
        events.append(("read", id(self)))
        return read(self)

    monkeypatch.setattr(model_runner.ModelRunner, "launch", logged_launch)
    monkeypatch.setattr(model_runner.LaunchedStep, "read", logged_read)
    for async_scheduling in (True, False):
        events.clear()
        engine = Engine(tiny_llama(), num_blocks=40, block_size=4, async_scheduling=async_scheduling)
        engine.add_request([5, 6, 7], 6)
        engine.add_request([1, 2], 4, n=2, temperature=1.0)
        engine.run()
        kinds = [event[0] for event in events]
        if async_scheduling:
            assert kinds[:3] == ["launch", "launch", "read"] and kinds[-1] == "read", kinds
            launches = [event for event in events if event[0] == "launch"]
            assert all(later[2] == earlier[1] for earlier, later in zip(launches, launches[1:])), (
                "each step must be given the step launched before it")
        else:
            assert kinds == ["launch", "read"] * (len(kinds) // 2), kinds


def test_host_staging_sends_each_dtype_in_one_buffer_that_two_steps_share_by_turns():
    """The step metadata's host buffers are kept from step to step, two sets used by turns: a step's tensors stay
    as they were while the next step is built (its copy may still be queued on a GPU), and a step that needs more
    room grows the buffers. build_step through them equals build_step with fresh ones, chunks included."""
    from attnlab.serving.paged_cache import HostStaging
    staging = HostStaging(torch.device("cpu"))
    first = staging.send({torch.int64: [[1, 2, 3], [4]], torch.int32: [[5, 6]]})
    assert [t.tolist() for t in first[torch.int64]] == [[1, 2, 3], [4]] and first[torch.int32][0].tolist() == [5, 6]
    assert first[torch.int64][0].untyped_storage().data_ptr() == first[torch.int64][1].untyped_storage().data_ptr(), (
        "one buffer, so one copy, per dtype")
    second = staging.send({torch.int64: [list(range(1000))], torch.int32: [[7]]})          # grows its buffer
    assert second[torch.int64][0].tolist() == list(range(1000))
    assert first[torch.int64][0].tolist() == [1, 2, 3], "the step before was overwritten while the next was built"
    staging.send({torch.int64: [[9, 9, 9]], torch.int32: []})                               # the first set again
    assert first[torch.int64][0].tolist() == [9, 9, 9], "the sets are not used by turns"
    seqs = decode_seqs([9, 3, 17], 4)
    chunk = Sequence(3, list(range(1, 12)), SamplingParams())
    chunk.block_table, chunk.num_computed, chunk.num_scheduled = [20, 21, 22], 2, 9
    for gather in (True, False):
        fresh = build_step(seqs + [chunk], 4, torch.device("cpu"), gather_decodes=gather)
        for _ in range(3):
            kept = build_step(seqs + [chunk], 4, torch.device("cpu"), gather_decodes=gather, staging=staging)
        for name in ("token_ids", "positions", "slot_mapping", "query_start", "block_tables", "context_lens",
                     "logits_at", "read_slots", "read_mask", "read_unused"):
            assert (getattr(kept, name) is None) == (getattr(fresh, name) is None)
            if getattr(fresh, name) is not None:
                torch.testing.assert_close(getattr(kept, name), getattr(fresh, name), msg=name)
