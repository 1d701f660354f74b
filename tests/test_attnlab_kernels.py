"""Chapter 10's Triton kernels (the reference solutions in attnlab.kernels), run in Triton's interpreter on the CPU
(conftest.py sets TRITON_INTERPRET=1 before any kernel is defined) and compiled ahead of time for Hopper.

References: chapter 9's gather (attnlab.serving.paged_kv.paged_attention), torch's scaled_dot_product_attention,
chapter 8's absorbed and naive latent attention, and generate() on the same models for the engine."""
from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from attnlab.decoding.generation import generate
from attnlab.kernels.hopper import KernelCompileError, compile_for_hopper, kernel_source
from attnlab.kernels.hopper import HOPPER_SHARED_BYTES
from attnlab.kernels.paged_decode import SUPPORTED_BLOCK_SIZES, SUPPORTED_HEAD_DIMS, compile_paged_decode, paged_decode
from attnlab.kernels.paged_mla import MLA_RESIDENT, compile_paged_mla_decode, paged_mla_decode
from attnlab.kernels.fused import FusedLlamaForward, add_rms_norm, rotary_in_place, silu_mul
from attnlab.kernels.paged_prefill import compile_paged_prefill, paged_prefill
from attnlab.layers.norm import RMSNorm
from attnlab.layers.rope import apply_rope, rope_angles
from attnlab.serving.model_runner import ModelRunner
from attnlab.kernels.split_kv import (GQA_RESIDENT, H200_SMS, SPLIT_COUNTS, compile_paged_decode_split, decode_plan,
                                     paged_decode_split, resident_programs)
from attnlab.layers.latent_attention import absorbed_latent_attention, naive_latent_attention
from attnlab.models.llama import Llama, LlamaConfig
from attnlab.models.mla import MLAConfig, MLAModel
from attnlab.serving.engine import Engine
from attnlab.serving.paged_cache import PagedCache, build_step
from attnlab.serving.paged_kv import gather_paged, paged_attention
from attnlab.serving.sequence import SamplingParams, Sequence


def paged_pools(lens, heads, dims, block_size, dtype=torch.float32, seed=0, extra_blocks=3):
    """NaN-filled pools (one per entry of dims) whose blocks are shuffled, holding each sequence's tokens; the
    tokens, contiguous, per sequence and pool; int32 block tables."""
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // block_size) for n in lens) + extra_blocks
    pools = [torch.full((num_blocks, block_size, heads, d), float("nan"), dtype=dtype) for d in dims]
    physical = torch.randperm(num_blocks, generator=g).tolist()
    tables = torch.zeros(len(lens), max(-(-n // block_size) for n in lens), dtype=torch.int32)
    tokens = []
    for b, n in enumerate(lens):
        rows = [torch.randn(n, heads, d, generator=g).to(dtype) for d in dims]
        for i in range(-(-n // block_size)):
            tables[b, i] = physical.pop()
            used = min(n, (i + 1) * block_size) - i * block_size
            for pool, row in zip(pools, rows):
                pool[tables[b, i], :used] = row[i * block_size:i * block_size + used]
        tokens.append(rows)
    return pools, tables, torch.tensor(lens, dtype=torch.int32), tokens


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("block_size,d_head", [(16, 64), (32, 128), (64, 64)])
def test_paged_decode_equals_the_gather_and_torch_attention(group, block_size, d_head):
    lens = [1, block_size, block_size + 1, 3 * block_size - 5, 7]
    (k_pool, v_pool), tables, lens_t, tokens = paged_pools(lens, 2, (d_head, d_head), block_size, seed=group)
    q = torch.randn(len(lens), 2 * group, d_head)
    z = paged_decode(q, k_pool, v_pool, tables, lens_t)
    assert not z.isnan().any(), "an unused (NaN) slot reached the output"
    gathered = paged_attention(q[:, :, None], k_pool, v_pool, tables, lens_t)[:, :, 0]
    torch.testing.assert_close(z, gathered, rtol=1e-4, atol=1e-5)
    for b, (k, v) in enumerate(tokens):
        want = F.scaled_dot_product_attention(q[b:b + 1, :, None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                              enable_gqa=True)[:, :, 0]
        torch.testing.assert_close(z[b:b + 1], want, rtol=1e-4, atol=1e-5)


def test_paged_decode_in_bf16_is_within_bf16_error_of_float32():
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([40, 3, 17], 2, (64, 64), 16, dtype=torch.bfloat16)
    q = torch.randn(3, 8, 64).bfloat16()
    z = paged_decode(q, k_pool, v_pool, tables, lens_t)
    assert z.dtype == torch.bfloat16
    want = paged_attention(q[:, :, None].float(), k_pool.float(), v_pool.float(), tables, lens_t)[:, :, 0]
    # bf16 keeps 8 significant bits, and the kernel's store rounds its float32 output once: to nearest on a GPU
    # (within 2^-8 of its magnitude); Triton's interpreter, which runs this test, truncates (within 2^-7)
    torch.testing.assert_close(z.float(), want, rtol=2 ** -7, atol=2 ** -8)


def test_paged_decode_reads_blocks_past_element_2_to_the_31():
    """One-byte elements, so a 4 GiB reservation reaches element 2^31; only the two used blocks get memory."""
    buffer = torch.empty(2 ** 32 + 2 ** 21, dtype=torch.uint8)
    base = 2 ** 31 + 2 ** 20
    num_blocks = (buffer.numel() - base) // (16 * 64)
    pool = buffer[base:base + num_blocks * 16 * 64].view(num_blocks, 16, 1, 64)
    assert (num_blocks - 1) * pool.stride(0) >= 2 ** 31, "the last block must start past element 2^31"
    g = torch.Generator().manual_seed(0)
    pool[2] = torch.randint(1, 100, (16, 1, 64), generator=g, dtype=torch.uint8)
    pool[num_blocks - 1] = torch.randint(1, 100, (16, 1, 64), generator=g, dtype=torch.uint8)
    q = torch.randn(1, 3, 64, generator=g) / 64
    z = paged_decode(q, pool, pool, torch.tensor([[2, num_blocks - 1]], dtype=torch.int32), torch.tensor([30]))
    k = torch.cat([pool[2], pool[num_blocks - 1]])[:30].float().transpose(0, 1)[None]
    torch.testing.assert_close(z, F.scaled_dot_product_attention(q[:, :, None], k, k, enable_gqa=True)[:, :, 0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n_heads,block_size,d_c,d_r", [(4, 16, 64, 16), (20, 64, 128, 32), (16, 64, 512, 64)])
def test_paged_mla_decode_equals_chapter_8s_absorbed_and_naive_attention(n_heads, block_size, d_c, d_r):
    """Through W_UK and W_UV: the kernel's latent output, expanded, equals chapter 8's attention on gathered
    latents, absorbed and naive alike."""
    d_nope, d_v = 16, 16
    lens = [1, block_size, block_size + 1, 2 * block_size + 9]
    (c_pool, r_pool), tables, lens_t, _ = paged_pools(lens, 1, (d_c, d_r), block_size, seed=n_heads)
    g = torch.Generator().manual_seed(1)
    q_nope = torch.randn(len(lens), n_heads, 1, d_nope, generator=g)
    q_rope = torch.randn(len(lens), n_heads, 1, d_r, generator=g)
    w_ukv = torch.randn(n_heads * (d_nope + d_v), d_c, generator=g) / d_c ** 0.5
    w_uk, w_uv = w_ukv.view(n_heads, d_nope + d_v, d_c).split([d_nope, d_v], dim=1)
    q_latent = torch.einsum("bhn,hnc->bhc", q_nope[:, :, 0], w_uk)
    z_latent = paged_mla_decode(q_latent, q_rope[:, :, 0], c_pool, r_pool, tables, lens_t, (d_nope + d_r) ** -0.5)
    z = torch.einsum("bhc,hvc->bhv", z_latent, w_uv)
    c_kv, k_rope = gather_paged(c_pool, tables, lens_t), gather_paged(r_pool, tables, lens_t)
    s = c_kv.shape[2]
    real = (torch.arange(s)[None, :] >= (s - lens_t.long())[:, None])[:, None, None, :]     # (B, 1, 1, S)
    for attention in (absorbed_latent_attention, naive_latent_attention):
        want = attention(q_nope, q_rope, c_kv, k_rope, w_ukv, d_v, real)[:, :, 0]
        torch.testing.assert_close(z, want, rtol=1e-4, atol=1e-5)


def test_paged_mla_decode_reads_flashmlas_single_buffer_layout():
    """[c_KV ; k^R] side by side in one (num_blocks, block_size, 1, 576) buffer: the two pools are views of it."""
    (c_pool, r_pool), tables, lens_t, _ = paged_pools([70, 5], 1, (512, 64), 64)
    buffer = torch.cat([c_pool, r_pool], -1)
    q_latent, q_rope = torch.randn(2, 16, 512), torch.randn(2, 16, 64)
    z_views = paged_mla_decode(q_latent, q_rope, buffer[..., :512], buffer[..., 512:], tables, lens_t, 0.05)
    z_apart = paged_mla_decode(q_latent, q_rope, c_pool, r_pool, tables, lens_t, 0.05)
    torch.testing.assert_close(z_views, z_apart, rtol=0, atol=0)


def test_every_kernel_compiles_for_hopper():
    binaries = compile_paged_decode([(g, bs, d) for g in (1, 8) for bs in (16, 64) for d in (64, 128)])
    binaries += compile_paged_decode([(4, 16, 128)], pool_dtype="fp16")
    binaries += compile_paged_mla_decode([(64, 512, 64), (16, 32, 16)])
    assert len(binaries) == 11 and all(b.cubin_bytes > 0 and b.ptx_lines > 0 for b in binaries)
    assert all(0 < b.shared_bytes <= 227 * 1024 for b in binaries), "each must fit a Hopper program's shared memory"


@triton.jit
def _scale_row(x, factor):
    return x * factor


@triton.jit
def _sum_kernel(out_ptr, x_ptr, n, BLOCK: tl.constexpr):
    total = 0                                    # int32 here, float32 after the first iteration
    for i in range(0, tl.cdiv(n, BLOCK)):
        offsets = i * BLOCK + tl.arange(0, BLOCK)
        total = total + tl.sum(_scale_row(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), 1.0))
    tl.store(out_ptr, total)


@triton.jit
def _sum_kernel_fixed(out_ptr, x_ptr, n, BLOCK: tl.constexpr):
    total = tl.zeros((), tl.float32)
    for i in range(0, tl.cdiv(n, BLOCK)):
        offsets = i * BLOCK + tl.arange(0, BLOCK)
        total = total + tl.sum(_scale_row(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), 1.0))
    tl.store(out_ptr, total)


def test_the_hopper_compile_catches_a_kernel_that_only_the_interpreter_runs():
    """A loop-carried variable that changes dtype: the interpreter gives the right sum, the compiler refuses it."""
    x, out = torch.randn(100), torch.zeros(1)
    _sum_kernel[(1,)](out, x, 100, BLOCK=32)
    torch.testing.assert_close(out[0], x.sum())
    signature = {"out_ptr": "*fp32", "x_ptr": "*fp32", "n": "i32"}
    with pytest.raises(KernelCompileError, match="does not compile for Hopper"):
        compile_for_hopper(_sum_kernel, signature, [{"BLOCK": 32}])
    assert "def _scale_row" in kernel_source(_sum_kernel_fixed), "a kernel's @triton.jit helpers travel with it"
    binary, = compile_for_hopper(_sum_kernel_fixed, signature, [{"BLOCK": 32}])
    assert binary.cubin_bytes > 0


def tiny_llama() -> Llama:
    torch.manual_seed(0)
    return Llama(LlamaConfig(vocab_size=50, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, n_layers=2,
                             max_seq_len=96)).eval()


def tiny_mla() -> MLAModel:
    torch.manual_seed(1)
    return MLAModel(MLAConfig(vocab_size=50, d_model=64, n_heads=4, kv_lora_rank=32, qk_nope_head_dim=16,
                              qk_rope_head_dim=16, v_head_dim=16, d_ff=96, n_layers=2, max_seq_len=96)).eval()


@pytest.mark.parametrize("make_model", [tiny_llama, tiny_mla], ids=["gqa", "mla"])
def test_the_engine_on_the_kernels_equals_generating_each_request_alone(make_model):
    model = make_model()
    rng = random.Random(0)
    reqs = [([rng.randrange(50) for _ in range(rng.randint(1, 30))], rng.randint(16, 40)) for _ in range(6)]
    alone = [generate(model, torch.tensor([p]), n).tokens[0, len(p):].tolist() for p, n in reqs]
    # Preempts, and prefills in chunks of at most 16 tokens beside the decodes; unused slots NaN.
    engine = Engine(model, num_blocks=5, block_size=16, max_num_seqs=4, max_num_batched_tokens=16, attention="triton")
    assert engine.runner.attention == "triton" and all(cache.decode_kernel is not None for cache in engine.runner.caches)
    latent = model.config.cache_shapes.latent           # MLA's chunks attend with torch; GQA's with paged_prefill
    assert all((cache.prefill_kernel is None) == latent for cache in engine.runner.caches)
    for cache in engine.runner.caches:
        cache.k_pool.fill_(float("nan"))
        cache.v_pool.fill_(float("nan"))
    ids = [engine.add_request(p, n)[0] for p, n in reqs]
    outputs = engine.run()
    assert [outputs[i] for i in ids] == alone
    assert engine.stats.preemptions > 0, "the small pool was meant to force preemption"
    assert engine.stats.decode_tokens > 0
    # Nothing was patched into the model: without the engine it attends with torch, as before.
    assert [generate(model, torch.tensor([p]), n).tokens[0, len(p):].tolist() for p, n in reqs] == alone


def test_two_engines_on_one_model_do_not_interfere():
    """Each engine chose its attention once, for its own caches: nothing is installed into the model."""
    model = tiny_llama()
    before = {name: getattr(layer.attn, "attention_fn") for name, layer in enumerate(model.layers)}
    on_kernels = Engine(model, num_blocks=8, block_size=16, attention="triton")
    on_torch = Engine(model, num_blocks=8, block_size=16, attention="torch")
    assert all(c.decode_kernel is not None for c in on_kernels.runner.caches)
    assert all(c.decode_kernel is None for c in on_torch.runner.caches)
    assert {name: layer.attn.attention_fn for name, layer in enumerate(model.layers)} == before
    prompt = [3, 1, 4, 1, 5]
    want = generate(model, torch.tensor([prompt]), 4).tokens[0, len(prompt):].tolist()
    for engine in (on_torch, on_kernels, on_torch):
        seq_id = engine.add_request(prompt, 4)[0]
        assert engine.run()[seq_id] == want


def test_kernels_work_when_triton_was_imported_first():
    """import triton before attnlab.kernels, on a machine without CUDA: Triton's own helpers (tl.max, tl.sum) were
    then made for compiled kernels, and an interpreted kernel could not call them."""
    code = textwrap.dedent("""
        import os
        os.environ.pop("TRITON_INTERPRET", None)
        import triton
        import torch
        from attnlab.kernels.paged_decode import paged_decode
        from attnlab.serving.paged_kv import paged_attention
        g = torch.Generator().manual_seed(0)
        q, k_pool, v_pool = torch.randn(2, 4, 16, generator=g), torch.randn(4, 16, 2, 16, generator=g), torch.randn(4, 16, 2, 16, generator=g)
        tables, lens = torch.tensor([[0, 1], [2, 3]]), torch.tensor([20, 5])
        z = paged_decode(q, k_pool, v_pool, tables, lens)
        want = paged_attention(q[:, :, None], k_pool, v_pool, tables, lens)[:, :, 0]
        torch.testing.assert_close(z, want, rtol=1e-5, atol=1e-5)
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_compiled_kernels_multiply_float32_in_ieee_not_tf32():
    """On NVIDIA GPUs Triton's default float32 dot is TF32 (about 1e-4 of error); the interpreter cannot show it,
    the PTX can."""
    from attnlab.kernels.paged_decode import compile_paged_decode
    from attnlab.kernels.paged_mla import compile_paged_mla_decode
    for binary in compile_paged_decode([(4, 16, 64)], pool_dtype="fp32") + compile_paged_mla_decode([(16, 64, 64)], pool_dtype="fp32"):
        assert binary.tf32_instructions == 0, "a float32 tl.dot compiled to TF32: give it input_precision='ieee'"


def test_paged_mla_decode_reads_blocks_past_element_2_to_the_31():
    buffer = torch.empty(2 ** 32 + 2 ** 21, dtype=torch.uint8)
    base, row = 2 ** 31 + 2 ** 20, 16 * 48
    num_blocks = (buffer.numel() - base) // row
    pool = buffer[base:base + num_blocks * row].view(num_blocks, 16, 1, 48)
    assert (num_blocks - 1) * pool.stride(0) >= 2 ** 31
    g = torch.Generator().manual_seed(2)
    pool[1] = torch.randint(1, 100, (16, 1, 48), generator=g, dtype=torch.uint8)
    pool[num_blocks - 1] = torch.randint(1, 100, (16, 1, 48), generator=g, dtype=torch.uint8)
    q = torch.randn(1, 5, 48, generator=g) / 64
    z = paged_mla_decode(q[..., :32], q[..., 32:], pool[..., :32], pool[..., 32:],
                         torch.tensor([[1, num_blocks - 1]], dtype=torch.int32), torch.tensor([29]), 0.3)
    latent = torch.cat([pool[1], pool[num_blocks - 1]])[:29, 0].float()[None, None]
    want = F.scaled_dot_product_attention(q[:, :, None], latent, latent[..., :32], scale=0.3, enable_gqa=True)
    torch.testing.assert_close(z, want[:, :, 0], rtol=1e-4, atol=1e-4)


def test_kernels_never_write_past_the_heads_they_own():
    """Outputs followed by spare NaN rows: the tiles' padding rows (a group of 3 padded to 16, 20 heads in tiles of
    16) stay unwritten."""
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([9, 30], 2, (32, 32), 16)
    guarded = torch.full((2, 6 + 16, 32), float("nan"))
    paged_decode(torch.randn(2, 6, 32), k_pool, v_pool, tables, lens_t, out=guarded[:, :6])
    assert not guarded[:, :6].isnan().any() and guarded[:, 6:].isnan().all()
    (c_pool, r_pool), tables, lens_t, _ = paged_pools([9, 30], 1, (32, 16), 16)
    guarded = torch.full((2, 20 + 16, 32), float("nan"))
    paged_mla_decode(torch.randn(2, 20, 32), torch.randn(2, 20, 16), c_pool, r_pool, tables, lens_t, 0.2,
                     out=guarded[:, :20])
    assert not guarded[:, :20].isnan().any() and guarded[:, 20:].isnan().all()


def _prefill_step(chunks, block_size, num_blocks, gather_chunks, seed=0):
    """Sequences each computing one chunk (offset, length) after `offset` tokens already in the pool, on shuffled
    blocks; chapter 9's step metadata for them."""
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    seqs = []
    for i, (offset, size) in enumerate(chunks):
        seq = Sequence(i, list(range(1, offset + size + 1)), SamplingParams())
        seq.block_table = [order.pop() for _ in range(-(-(offset + size) // block_size))]
        seq.num_computed, seq.num_scheduled = offset, size
        seqs.append(seq)
    return build_step(seqs, block_size, torch.device("cpu"), gather_chunks=gather_chunks)


@pytest.mark.parametrize("group,block_size,d_head,tiles", [(1, 16, 32, (16, 16)), (4, 16, 64, (64, 64)),
                                                           (3, 32, 16, (16, 64)), (2, 64, 128, (32, 32))])
def test_paged_prefill_equals_chapter_9s_chunk_by_chunk_attention(group, block_size, d_head, tiles):
    """One launch for every chunk of a step against PagedCache's torch path, which gathers each chunk's keys and
    attends with a causal mask: chunks from position 0, after a cached prefix, of two tokens, longer than a tile;
    unused slots NaN."""
    chunks = [(0, 37), (20, 13), (45, 2), (3, 70)]
    num_blocks = sum(-(-(o + n) // block_size) for o, n in chunks) + 3
    k_pool = torch.full((num_blocks, block_size, 2, d_head), float("nan"))
    v_pool = k_pool.clone()
    torch_step = _prefill_step(chunks, block_size, num_blocks, gather_chunks=True)
    kernel_step = _prefill_step(chunks, block_size, num_blocks, gather_chunks=False)
    assert all(c.slots is None and c.mask is None for c in kernel_step.chunks)
    assert kernel_step.max_chunk_len == 70 and kernel_step.prefill_starts.tolist() == [0, 37, 50, 52, 122]
    for chunk in torch_step.chunks:               # every token of every context: random keys and values
        k_pool.view(-1, 2, d_head)[chunk.slots] = torch.randn(len(chunk.slots), 2, d_head)
        v_pool.view(-1, 2, d_head)[chunk.slots] = torch.randn(len(chunk.slots), 2, d_head)
    n = sum(size for _, size in chunks)
    q, k, v = torch.randn(1, 2 * group, n, d_head), torch.randn(1, 2, n, d_head), torch.randn(1, 2, n, d_head)
    sdpa = lambda q, k, v, mask: (F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), None)
    torch_cache = PagedCache(k_pool.clone(), v_pool.clone())
    torch_cache.step = torch_step
    want = torch_cache.attend(q, k, v, None, sdpa)
    kernel = lambda *args, **kwargs: paged_prefill(*args, tile_m=tiles[0], tile_n=tiles[1], **kwargs)
    kernel_cache = PagedCache(k_pool.clone(), v_pool.clone(), prefill_kernel=kernel)
    kernel_cache.step = kernel_step
    got = kernel_cache.attend(q, k, v, None, sdpa)
    assert not got.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_paged_prefill_in_bf16_writes_bf16_within_bf16_error_of_float32():
    (k_pool, v_pool), tables, _, _ = paged_pools([50, 9], 2, (64, 64), 16, dtype=torch.bfloat16)
    q = torch.randn(30 + 9, 8, 64).bfloat16()
    starts, lens = torch.tensor([0, 30, 39]), torch.tensor([50, 9])
    z = paged_prefill(q, k_pool, v_pool, tables, starts, lens)
    assert z.dtype == torch.bfloat16, "the kernel writes the query's dtype itself"
    want = paged_prefill(q.float(), k_pool.float(), v_pool.float(), tables, starts, lens)
    # bf16 keeps 8 significant bits, and the store rounds the float32 output once: to nearest on a GPU (within 2^-8
    # of its magnitude); Triton's interpreter, which runs this test, truncates toward zero (within 2^-7)
    torch.testing.assert_close(z.float(), want, rtol=2 ** -7, atol=2 ** -8)


def test_paged_prefill_refuses_bad_chunks_with_clear_errors():
    (k_pool, v_pool), tables, _, _ = paged_pools([20, 5], 2, (32, 32), 16)
    q = torch.randn(25, 4, 32)
    cases = [
        (lambda: paged_prefill(q[0], k_pool, v_pool, tables, torch.tensor([0, 20, 25]), torch.tensor([20, 5])),
         "need q \\(N, H, D\\)"),
        (lambda: paged_prefill(q, k_pool, v_pool, tables, torch.tensor([0, 25]), torch.tensor([20, 5])),
         "query_start \\(C \\+ 1,\\)"),
        (lambda: paged_prefill(q, k_pool, v_pool, tables, torch.tensor([0, 10, 24]), torch.tensor([20, 5])),
         "rise from 0 to N = 25"),
        (lambda: paged_prefill(q, k_pool, v_pool, tables, torch.tensor([0, 15, 25]), torch.tensor([20, 5])),
         "at most each chunk's context_len"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_kernels_equal_chapter_7s_modules(dtype):
    """add_rms_norm, rotary_in_place and silu_mul against RMSNorm after a residual add, apply_rope and SwiGLU's
    middle, in the model's dtype: the same roundings, in float32 arithmetic."""
    g = torch.Generator().manual_seed(0)
    x, z = torch.randn(7, 96, generator=g).to(dtype), torch.randn(7, 96, generator=g).to(dtype)
    norm = RMSNorm(96, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(96, generator=g) + 0.5)
        stream = x.clone()
        fused_out = add_rms_norm(z, stream, norm.weight, norm.eps)
    # float32: equal to rounding; bf16: within one unit of the last of its 8 bits (2^-7 relative), since Triton's
    # interpreter, which runs these tests, truncates to bf16 where a GPU rounds to nearest
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2 ** -7, atol=2 ** -7)
    torch.testing.assert_close(stream, x + z, **tolerance)              # the stream keeps the sum
    # the norm rounds twice (before the gain, and its output), so in bf16 two units apart at most
    twice = tolerance if dtype == torch.float32 else dict(rtol=2 ** -6, atol=2 ** -6)
    with torch.no_grad():
        torch.testing.assert_close(fused_out, norm(stream), **twice)
        torch.testing.assert_close(add_rms_norm(x, None, norm.weight, norm.eps), norm(x), **twice)
    positions = torch.tensor([0, 5, 17, 127, 3])
    q, k = torch.randn(5, 6, 32, generator=g).to(dtype), torch.randn(5, 2, 32, generator=g).to(dtype)
    cos, sin = rope_angles(torch.arange(128)[None], 32, 10000.0)
    cos_sin = torch.cat([cos[0, 0], sin[0, 0]], -1).float()
    q_rot, k_rot = q.clone(), k.clone()
    rotary_in_place(q_rot, k_rot, cos_sin, positions)
    for rotated, x in ((q_rot, q), (k_rot, k)):
        want = apply_rope(x.transpose(0, 1)[None], positions[None], 10000.0)[0].transpose(0, 1)
        torch.testing.assert_close(rotated, want, **tolerance)
    gate, up = torch.randn(4, 40, generator=g).to(dtype), torch.randn(4, 40, generator=g).to(dtype)
    torch.testing.assert_close(silu_mul(gate, up), F.silu(gate) * up, **tolerance)


def test_the_fused_forward_gives_the_models_own_logits_on_a_packed_step():
    """FusedLlamaForward, the engine's forward on the kernels, against the Llama's own forward on the same packed
    step (decodes and prefill chunks), in the same pools: the logits agree to float32 rounding."""
    model = tiny_llama()
    engine = Engine(model, num_blocks=16, block_size=16, max_num_seqs=4, max_num_batched_tokens=24,
                    attention="triton")
    assert isinstance(engine.runner.model_forward, FusedLlamaForward)
    assert FusedLlamaForward.supports(model) and not FusedLlamaForward.supports(tiny_mla())
    for prompt in ([3, 1, 4, 1, 5], list(range(1, 30)), [9, 2]):
        engine.add_request(prompt, 6)
    with torch.no_grad():
        for _ in range(4):                       # a prefill step, a mixed step with a chunk, decode steps
            batch = engine.scheduler.next_step()
            fused = engine.runner.forward(batch)
            own = engine.runner.model_forward
            engine.runner.model_forward = ModelRunner.choose_forward(model, None, None)     # the model's forward
            plain = engine.runner.forward(batch)
            engine.runner.model_forward = own
            torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4)
            engine.scheduler.postprocess(batch, engine.runner.sample(batch, fused).read())


def test_the_engine_picks_torch_on_a_cpu_and_refuses_an_unknown_choice():
    model = tiny_llama()
    assert Engine(model, num_blocks=8, block_size=16).runner.attention == "torch"
    with pytest.raises(ValueError, match="'auto', 'triton', 'torch', a decode kernel or a pair"):
        Engine(model, num_blocks=8, block_size=16, attention="cuda")


def test_launchers_refuse_bad_input_with_clear_errors():
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([20], 2, (32, 32), 16)
    q = torch.randn(1, 4, 32)
    cases = [
        (lambda: paged_decode(q[0], k_pool, v_pool, tables, lens_t), "need q \\(B, H, D\\)"),
        (lambda: paged_decode(torch.randn(1, 3, 32), k_pool, v_pool, tables, lens_t), "multiple of n_kv_heads"),
        (lambda: paged_decode(q, k_pool[:, :8], v_pool[:, :8], tables, lens_t), "power of two >= 16"),
        (lambda: paged_decode(q, k_pool, v_pool, tables, torch.tensor([33])), "context_lens must be in 1..32"),
        (lambda: paged_decode(q, k_pool, v_pool, tables, torch.tensor([0])), "context_lens must be in 1..32"),
        (lambda: paged_decode(q, k_pool.transpose(2, 3), v_pool, tables, lens_t), "need q|contiguous last"),
        (lambda: paged_mla_decode(q, q[..., :16], k_pool, v_pool[..., :16], tables, lens_t, 1.0), "one shared latent"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.slow
def test_the_gpu_benchmark_script_runs_at_tiny_sizes_in_the_interpreter(repo):
    """bench/gpu_paged.py is prepared here and run on a GPU: --smoke runs all of its code paths at tiny sizes."""
    run = subprocess.run([sys.executable, "-m", "bench.gpu_paged", "--smoke"], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    checks = [line for line in run.stdout.splitlines() if line.startswith("correctness")]
    assert len(checks) == 14 and all(line.endswith(" ok") for line in checks), run.stdout   # 4 GQA x 3, MLA x 2
    # the engine (graphs' buffers, on the kernels) against transformers' two ways of batching, and the step profile
    assert "6/6 requests give generate_batch's tokens" in run.stdout, run.stdout
    assert "unavailable" not in run.stdout and "transformers generate, static batches" in run.stdout, run.stdout
    # the decode steps at both row counts, with the kernels each layer launches: 43 with chapter 7's modules
    # (RMSNorm 6 + 6, rotary 7 + 7, ...), at most 16 with FusedLlamaForward, counted in a smoke run
    steps = re.findall(r"decode steps of (\d+) sequences: wall .* (\d+) kernels per layer", run.stdout)
    assert [rows for rows, _ in steps] == ["4", "6"], run.stdout
    assert all(0 < int(kernels) <= 16 for _, kernels in steps), run.stdout
    assert "prefill, 3 prompts of 20 tokens" in run.stdout, run.stdout


def with_table_tail(tables: torch.Tensor, extra: int = 3) -> torch.Tensor:
    """Block tables with `extra` entries past every row's used blocks, each a block id far outside the pool: a
    kernel that reads one fails (the interpreter reads garbage or faults, a GPU faults), as FlashMLA's tests do."""
    return torch.cat([tables, torch.full((tables.shape[0], extra), 2 ** 30, dtype=torch.int32)], 1)


# Splits 1-8, every supported head dim and block size, groups of 1 to 8 (3 is SmolLM2's), tiles of one block, of
# several and of part of one: pairs that cover each value at least once without the whole product (the interpreter
# runs each program in Python).
SPLIT_CASES = [  # (num_splits, group, d_head, block_size, tile_n)
    (1, 4, 64, 16, 16), (2, 1, 128, 32, 64), (3, 8, 64, 64, 32), (4, 3, 256, 16, 32), (5, 2, 128, 128, 64),
    (6, 4, 16, 32, 16), (7, 1, 32, 64, 64), (8, 8, 256, 128, 32), (8, 2, 64, 16, 64), (2, 4, 256, 64, 32)]


@pytest.mark.parametrize("num_splits,group,d_head,block_size,tile_n", SPLIT_CASES)
def test_paged_decode_split_equals_the_gather_on_nan_pools(num_splits, group, d_head, block_size, tile_n):
    """Lengths of 1 (every split but one empty), a block, a block and one, a tile and one, and several tiles."""
    lens = [1, block_size, block_size + 1, tile_n + 1, 4 * tile_n + 3]
    (k_pool, v_pool), tables, lens_t, _ = paged_pools(lens, 2, (d_head, d_head), block_size, seed=num_splits)
    q = torch.randn(len(lens), 2 * group, d_head)
    z = paged_decode_split(q, k_pool, v_pool, with_table_tail(tables), lens_t, num_splits=num_splits, tile_n=tile_n)
    assert not z.isnan().any(), "an unused (NaN) slot, or an empty split, reached the output"
    want = paged_attention(q[:, :, None], k_pool, v_pool, tables, lens_t)[:, :, 0]
    torch.testing.assert_close(z, want, rtol=1e-4, atol=1e-5)
    # the same without splits: one program per (sequence, KV head) gives the same numbers
    one = paged_decode_split(q, k_pool, v_pool, tables, lens_t, num_splits=1, tile_n=tile_n)
    torch.testing.assert_close(z, one, rtol=1e-5, atol=1e-6)


def test_paged_decode_split_in_bf16_is_within_bf16_error_of_float32():
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([200, 3, 77], 2, (128, 128), 16, dtype=torch.bfloat16)
    q = torch.randn(3, 8, 128).bfloat16()
    z = paged_decode_split(q, k_pool, v_pool, with_table_tail(tables), lens_t, num_splits=4)
    assert z.dtype == torch.bfloat16
    want = paged_attention(q[:, :, None].float(), k_pool.float(), v_pool.float(), tables, lens_t)[:, :, 0]
    # one rounding to bf16, in the merge's store: within 2^-7 of the magnitude in the interpreter, which truncates
    torch.testing.assert_close(z.float(), want, rtol=2 ** -7, atol=2 ** -8)


@pytest.mark.parametrize("num_splits,block_size,n_heads", [(1, 64, 16), (3, 16, 128), (8, 128, 70), (5, 32, 64)])
def test_paged_mla_decode_splits_at_deepseek_v3s_latent(num_splits, block_size, n_heads):
    """A 512 + 64 latent, 64-head tiles (70 heads: a partial second tile), splits 1-8, on NaN pools with table tails."""
    lens = [1, block_size + 1, 300]
    (c_pool, r_pool), tables, lens_t, tokens = paged_pools(lens, 1, (512, 64), block_size, seed=num_splits)
    g = torch.Generator().manual_seed(num_splits)
    q_latent, q_rope = torch.randn(3, n_heads, 512, generator=g), torch.randn(3, n_heads, 64, generator=g)
    scale = 192 ** -0.5
    z = paged_mla_decode(q_latent, q_rope, c_pool, r_pool, with_table_tail(tables), lens_t, scale,
                         num_splits=num_splits)
    assert not z.isnan().any()
    for b, (c_kv, k_rope) in enumerate(tokens):
        q = torch.cat([q_latent[b], q_rope[b]], -1)[None, :, None]                 # (1, H, 1, 576)
        k = torch.cat([c_kv, k_rope], -1).transpose(0, 1)[None]                     # (1, 1, T, 576)
        want = F.scaled_dot_product_attention(q, k, c_kv.transpose(0, 1)[None], scale=scale, enable_gqa=True)
        torch.testing.assert_close(z[b:b + 1], want[:, :, 0], rtol=1e-4, atol=1e-5)


def test_every_supported_shape_compiles_for_hopper_within_shared_memory():
    """The sm_90 compile of the kernels the engine runs, at every head dim and block size the launchers accept:
    each fits a program's 227 KB of shared memory; bf16 multiplies on the tensor cores (mma for GQA's 16-row tiles,
    wgmma for MLA's 64-head tiles); float32 keeps IEEE products (no TF32)."""
    gqa = [(4, bs, d, 4) for d in SUPPORTED_HEAD_DIMS for bs in SUPPORTED_BLOCK_SIZES]
    binaries = compile_paged_decode_split(gqa) + compile_paged_decode_split(
        [(8, 128, d, 4) for d in SUPPORTED_HEAD_DIMS], pool_dtype="fp32")
    assert all(0 < b.shared_bytes <= HOPPER_SHARED_BYTES for b in binaries), [b.shared_bytes for b in binaries]
    assert all(b.tf32_instructions == 0 for b in binaries[len(gqa):]), "a float32 pool's dot compiled to TF32"
    mla = compile_paged_mla_decode([(bs, 512, 64) for bs in SUPPORTED_BLOCK_SIZES])
    assert all(0 < b.shared_bytes <= HOPPER_SHARED_BYTES for b in mla), [b.shared_bytes for b in mla]
    assert all(b.wgmma_instructions > 0 and b.tf32_instructions == 0 for b in mla), (
        "bf16 MLA tiles of 64 heads must run on wgmma, in bf16")
    fp32_mla, = compile_paged_mla_decode([(64, 512, 64)], pool_dtype="fp32")
    assert fp32_mla.wgmma_instructions == 0 and fp32_mla.tf32_instructions == 0
    # exercise 1's kernel, which holds a whole block: every shape its launcher accepts, at its largest
    whole = compile_paged_decode([(8, 128, 256), (8, 64, 256)], pool_dtype="bf16") + compile_paged_decode(
        [(8, 64, 256), (8, 128, 128)], pool_dtype="fp32")
    assert all(0 < b.shared_bytes <= HOPPER_SHARED_BYTES for b in whole)
    prefill = compile_paged_prefill([(4, bs, d) for d in SUPPORTED_HEAD_DIMS for bs in (16, 128)])
    assert all(0 < b.shared_bytes <= HOPPER_SHARED_BYTES for b in prefill), [b.shared_bytes for b in prefill]
    assert all(b.wgmma_instructions > 0 for b in prefill), "bf16 prefill tiles of 64 queries must run on wgmma"
    # The kernels the engine runs: no register spilled to local memory, and no block-table load waited for in the
    # loop (three stages let the pipeliner load the table a stage ahead of the keys and values it addresses)
    engine = binaries[:len(gqa)] + mla + prefill
    report = "; ".join(f"{b.constexprs.get('D_HEAD', b.constexprs.get('D_LATENT'))}/{b.constexprs['BLOCK_SIZE']}: "
                       f"{b.registers} registers, {b.spill_bytes} B spilled, {b.waiting_table_loads} waiting loads"
                       for b in engine)
    assert all(b.spill_bytes == 0 and b.waiting_table_loads == 0 for b in engine), report


def test_shapes_past_the_kernels_limits_get_a_clear_error_before_launch():
    """A head dim of 1024 with blocks of 64 once failed deep in Triton ("OutOfResources: shared memory")."""
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([20], 1, (1024, 1024), 64)
    q = torch.randn(1, 4, 1024)
    for launcher in (paged_decode, paged_decode_split):
        with pytest.raises(ValueError, match=r"head dim \(1024\).*one of \(16, 32, 64, 128, 256\)"):
            launcher(q, k_pool, v_pool, tables, lens_t)
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([300], 1, (64, 64), 256)
    with pytest.raises(ValueError, match=r"block_size must be one of \(16, 32, 64, 128\)"):
        paged_decode_split(torch.randn(1, 4, 64), k_pool, v_pool, tables, lens_t)
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([20], 1, (256, 256), 128, dtype=torch.float32)
    with pytest.raises(ValueError, match="use paged_decode_split"):
        paged_decode(torch.randn(1, 4, 256), k_pool, v_pool, tables, lens_t)
    (c_pool, r_pool), tables, lens_t, _ = paged_pools([20], 1, (1024, 64), 64)
    with pytest.raises(ValueError, match="d_r <= d_c <= 512"):
        paged_mla_decode(torch.randn(1, 4, 1024), torch.randn(1, 4, 64), c_pool, r_pool, tables, lens_t, 0.1)
    (k_pool, v_pool), tables, lens_t, _ = paged_pools([20], 1, (64, 64), 16)
    with pytest.raises(ValueError, match="num_splits must be in 1..16"):
        paged_decode_split(torch.randn(1, 4, 64), k_pool, v_pool, tables, lens_t, num_splits=17)


def test_the_plan_fills_the_gpus_program_slots_in_nearly_full_waves():
    """decode_plan, for an H200's 132 multiprocessors, with the programs of each kernel resident on one (GQA at head
    dim 128: 4, so 528 slots; MLA: 1, so 132): the fewest power-of-two splits that keep the slots at least 80% busy
    over the grid's waves (w waves are w / ceil(w) busy); never under 4 tiles per split, never over 16 splits."""
    plan = lambda programs, max_len, resident=4: decode_plan(programs, max_len, 64, sm_count=H200_SMS,
                                                              resident=resident).num_splits
    assert plan(128 * 8, 32768) == 1              # 1,024 programs: 1.94 waves of 528, 97% busy
    assert plan(32 * 8, 1024) == 2                # 256 programs: 0.48 of a wave, 48%; 2 splits: 97%
    assert plan(64 * 8, 8192) == 1                # Llama-3-8B at B = 64: 512 programs, 0.97 of a wave
    assert plan(64 * 8, 8192, resident=3) == 2    # 396 slots: 1.29 waves are 65% busy; 2 splits, 2.59 waves: 86%
    assert plan(8, 32768) == 16                   # one sequence: the cap
    assert plan(8, 300) == 2                      # 5 tiles: at most 2 splits of at least 4 tiles, rounded to a power
    assert plan(64 * 2, 8192, resident=MLA_RESIDENT) == 1    # MLA: 128 programs in 132 slots, 97% busy
    assert plan(16 * 2, 8192, resident=MLA_RESIDENT) == 4    # 32 programs: 24%; 4 splits: 97%
    counts = {plan(b * h, n) for b in (1, 3, 8, 32, 64, 128) for h in (1, 8) for n in (64, 1000, 4096, 32768)}
    assert counts <= set(SPLIT_COUNTS), f"split counts {sorted(counts)}: each is a kernel variant to compile"


def test_resident_programs_match_the_compile():
    """GQA_RESIDENT and MLA_RESIDENT, which the plan uses without a GPU, are what the sm_90 compile's registers and
    shared memory allow, at every supported head dim and DeepSeek-V3's latent."""
    for d_head, resident in GQA_RESIDENT.items():
        binary, = compile_paged_decode_split([(8, 16, d_head, 4)])
        assert resident_programs(binary.registers, binary.shared_bytes, 4) == resident, (d_head, binary)
    mla, = compile_paged_mla_decode([(64, 512, 64)])
    assert resident_programs(mla.registers, mla.shared_bytes, 8) == MLA_RESIDENT, mla
