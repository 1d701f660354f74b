"""python -m bench.gpu_paged: chapter 10's GPU checks, one prepared script that prints every figure.

On a CUDA GPU (written for an H200; at most 5 minutes):
  1. correctness of the kernels against chapter 9's gather reference, on the GPU, in bf16, with and without splits;
  2. achieved bandwidth of paged GQA decode (bytes of K/V read / time, as a share of the GPU's peak) at batches of
     32-128 and contexts of 1k-32k: the split-KV kernel (the split count its plan chose), exercise 1's kernel (one
     program per sequence and KV head), torch's SDPA on the same K/V laid out contiguously, and FlashInfer or
     flash-attn when they are installed;
  3. paged MLA decode at DeepSeek-V3's dims (128 heads, a 512 + 64 latent, blocks of 64), in TFLOP/s and as a
     share of bf16 peak, beside torch's two batched matmuls on the same latent laid out contiguously;
  4. chapter 9's engine on a random model of SmolLM2's shape in bf16, with the kernels and CUDA graphs, at 64 and
     192 rows, against transformers' generate_batch and static generate on identical requests; for a decode step:
     the GPU's own time (its CUDA graph replayed back to back between CUDA events) as a share of the wall time of
     50 steps in the engine's loop, and the kernels each layer launches;
  5. prefill: the engine's first step over 32 prompts of 512 tokens (chapter 10's paged prefill kernel) beside
     transformers' model with SDPA attention on the same prompts;
  6. one packed step of that engine (64 decodes and a prompt's prefill chunk), on the kernels and on torch.
Kernels under 100 us are timed as CUDA graphs (triton's do_bench_cudagraph), so the launcher's Python is not
counted; every time is a median. With --smoke it runs the same code at tiny sizes in Triton's interpreter, to check
the script on a CPU.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attnlab.kernels.paged_decode import paged_decode
from attnlab.kernels.paged_mla import MLA_BLOCK_H, MLA_RESIDENT, mla_tile, paged_mla_decode
from attnlab.kernels.split_kv import GQA_RESIDENT, decode_plan, gqa_tile, paged_decode_split
from attnlab.serving.paged_kv import gather_paged, paged_attention

# HBM peaks by device name, the more specific names first (an H100 PCIe card has less than an SXM one).
PEAK_BYTES_PER_S = [("H200", 4.8e12), ("H100 PCIe", 2.0e12), ("H100 NVL", 3.9e12), ("H100", 3.35e12),
                    ("H800", 3.35e12), ("A100-SXM4-40GB", 1.555e12), ("A100", 2.0e12), ("L40S", 0.864e12)]
# Dense bf16 tensor-core peaks, by device name (the H200 and H100 SXM share one: 989 TFLOP/s).
PEAK_BF16_FLOPS = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H800", 989e12), ("A100", 312e12)]
LAUNCH_CONFIGS = [{}, {"num_warps": 8}]         # the plan's own launch options, and twice its warps


def peak_bandwidth(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BYTES_PER_S if key in name), None)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


def seconds(fn, device: torch.device) -> float:
    """Median time of one call. On a GPU: triton's do_bench (CUDA events, L2 flushed); under 100 us, where the
    launcher's Python would be most of what do_bench sees, the call captured as a CUDA graph and replayed
    (do_bench_cudagraph). On a CPU: a few calls."""
    if device.type == "cuda":
        import triton.testing
        t = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") / 1e3
        if t < 100e-6:
            try:
                t = triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median") / 1e3
            except Exception as exc:              # not capturable here: the plain median stands, said once
                print(f"  (do_bench_cudagraph failed: {type(exc).__name__}; timed without a graph)", flush=True)
        return t
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fastest(call, device: torch.device) -> tuple[str, float]:
    """(launch options, seconds) of the fastest of LAUNCH_CONFIGS for call(**options); the first one on a CPU."""
    configs = LAUNCH_CONFIGS if device.type == "cuda" else LAUNCH_CONFIGS[:1]
    times = {str(config): seconds(lambda: call(**config), device) for config in configs}
    return min(times.items(), key=lambda item: item[1])


def paged_batch(batch: int, context: int, heads: int, dims: tuple[int, ...], block_size: int, dtype, device,
                seed: int = 0, mixed: bool = False, nan_fill: bool = False):
    """Pools of shuffled blocks holding `batch` sequences of `context` tokens (or random lengths up to it); with
    nan_fill, every slot no sequence uses is NaN, so that a kernel reading one shows it."""
    g = torch.Generator(device=device).manual_seed(seed)
    lens = (torch.randint(1, context + 1, (batch,), generator=g, device=device) if mixed
            else torch.full((batch,), context, device=device))
    per_seq = math.ceil(context / block_size)
    num_blocks = batch * per_seq + 1
    pools = [torch.randn(num_blocks, block_size, heads, d, generator=g, device=device).to(dtype) for d in dims]
    tables = torch.randperm(num_blocks, generator=g, device=device)[:batch * per_seq].view(batch, per_seq).int()
    if nan_fill:
        used = torch.zeros(num_blocks, block_size, dtype=torch.bool, device=device)
        position = torch.arange(per_seq * block_size, device=device)
        for b in range(batch):
            mine = position[position < lens[b]]
            used[tables[b, mine // block_size].long(), mine % block_size] = True
        for pool in pools:
            pool[~used] = float("nan")
    return pools, tables, lens


def check_correctness(device, dtype, quick: bool) -> list[str]:
    lines = []
    batch, context = (3, 40) if quick else (16, 3000)
    for group, block_size, d in ((1, 16, 128), (4, 16, 128), (8, 32, 64), (4, 64, 128)):
        (k_pool, v_pool), tables, lens = paged_batch(batch, context, 2 if quick else 8, (d, d), block_size, dtype,
                                                     device, seed=group, mixed=True, nan_fill=True)
        q = torch.randn(batch, k_pool.shape[2] * group, d, device=device).to(dtype)
        want = paged_attention(q[:, :, None].float(), k_pool.float(), v_pool.float(), tables, lens)[:, :, 0]
        for name, z in (("one program", paged_decode(q, k_pool, v_pool, tables, lens)),
                        ("split, planned", paged_decode_split(q, k_pool, v_pool, tables, lens)),
                        ("split in 5", paged_decode_split(q, k_pool, v_pool, tables, lens, num_splits=5))):
            error = (z.float() - want).abs().max().item()
            ok = not z.isnan().any().item() and error < 2e-2
            lines.append(f"correctness GQA {name}, group {group}, block {block_size}, d {d}: max error {error:.1e} "
                         f"{'ok' if ok else 'FAILED'}")
    n_heads, d_c, d_r, block_size = (4, 64, 16, 16) if quick else (128, 512, 64, 64)
    (c_pool, r_pool), tables, lens = paged_batch(batch, context, 1, (d_c, d_r), block_size, dtype, device, seed=7,
                                                 mixed=True, nan_fill=True)
    q_latent = torch.randn(batch, n_heads, d_c, device=device).to(dtype) / 8
    q_rope = torch.randn(batch, n_heads, d_r, device=device).to(dtype) / 8
    scale = 1 / math.sqrt(128 + d_r)
    zs = {"planned": paged_mla_decode(q_latent, q_rope, c_pool, r_pool, tables, lens, scale).float(),
          "split in 3": paged_mla_decode(q_latent, q_rope, c_pool, r_pool, tables, lens, scale, num_splits=3).float()}
    c_kv, k_rope = gather_paged(c_pool.float(), tables, lens), gather_paged(r_pool.float(), tables, lens)
    s = c_kv.shape[2]
    real = torch.arange(s, device=device)[None, :] >= (s - lens.long())[:, None]
    want = F.scaled_dot_product_attention(torch.cat([q_latent, q_rope], -1).float()[:, :, None],
                                          torch.cat([c_kv, k_rope], -1).expand(-1, n_heads, -1, -1),
                                          c_kv.expand(-1, n_heads, -1, -1), attn_mask=real[:, None, None, :],
                                          scale=scale)[:, :, 0]
    for name, z in zs.items():
        error = (z - want).abs().max().item()
        ok = not z.isnan().any().item() and error < 2e-2
        lines.append(f"correctness MLA {name}, {n_heads} heads, latent {d_c}+{d_r}, block {block_size}: max error "
                     f"{error:.1e} {'ok' if ok else 'FAILED'}")
    return lines


def sdpa_decode(q, k, v):
    """torch's attention for one query per row: q (B, H, D), k and v (B, H_kv, S, D)."""
    try:
        return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]
    except TypeError:                    # a torch older than 2.5: copy the KV heads for each query head
        group = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q[:, :, None], k.repeat_interleave(group, 1),
                                              v.repeat_interleave(group, 1))[:, :, 0]


def flash_attn_line(q, k_pool, v_pool, tables, lens, kv_bytes, peak, device) -> str:
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        return "flash-attn: not installed"
    try:
        # flash-attn's paged cache takes pages of a multiple of 256 tokens: the same tokens, re-blocked.
        page = 256
        batch, per_seq = tables.shape[0], math.ceil(int(lens.max()) / page)
        k = gather_paged(k_pool, tables, lens).transpose(1, 2)           # (B, S, H_kv, D)
        v = gather_paged(v_pool, tables, lens).transpose(1, 2)
        pad = per_seq * page - k.shape[1]
        k_cache = F.pad(k, (0, 0, 0, 0, 0, pad)).reshape(batch * per_seq, page, *k.shape[2:])
        v_cache = F.pad(v, (0, 0, 0, 0, 0, pad)).reshape(batch * per_seq, page, *v.shape[2:])
        table = torch.arange(batch * per_seq, device=device, dtype=torch.int32).view(batch, per_seq)
        t = seconds(lambda: flash_attn_with_kvcache(q[:, None], k_cache, v_cache, cache_seqlens=lens.int(),
                                                    block_table=table), device)
        return f"flash-attn (pages of 256): {t * 1e6:8.1f} us, {kv_bytes / t / 1e9:7.0f} GB/s" + (
            f" = {100 * kv_bytes / t / peak:4.1f}% of peak" if peak else "")
    except Exception as exc:  # an API that moved between releases: report it, go on
        return f"flash-attn: failed ({type(exc).__name__}: {str(exc)[:120]})"


def flashinfer_line(q, k_pool, v_pool, tables, lens, kv_bytes, peak, device) -> str:
    try:
        import flashinfer
    except ImportError:
        return "FlashInfer: not installed"
    try:
        batch, per_seq = tables.shape
        block_size = k_pool.shape[1]
        workspace = torch.empty(256 * 2 ** 20, dtype=torch.uint8, device=device)
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        indptr = torch.arange(batch + 1, device=device, dtype=torch.int32) * per_seq
        last = ((lens - 1) % block_size + 1).int()
        wrapper.plan(indptr, tables.reshape(-1).int(), last, q.shape[1], k_pool.shape[2], q.shape[2], block_size,
                     data_type=k_pool.dtype, q_data_type=q.dtype)
        t = seconds(lambda: wrapper.run(q, (k_pool, v_pool)), device)
        return f"FlashInfer:               {t * 1e6:8.1f} us, {kv_bytes / t / 1e9:7.0f} GB/s" + (
            f" = {100 * kv_bytes / t / peak:4.1f}% of peak" if peak else "")
    except Exception as exc:
        return f"FlashInfer: failed ({type(exc).__name__}: {str(exc)[:120]})"


def contiguous(pool: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """The sequences' keys (or values) laid out contiguously, (B, H_kv, S, D): what torch's attention reads."""
    return gather_paged(pool, tables, lens).contiguous()


def bench_gqa(device, dtype, quick: bool) -> list[str]:
    peak = peak_bandwidth(device)
    n_kv_heads, group, d, block_size = (2, 4, 64, 16) if quick else (8, 4, 128, 16)   # Llama-3-8B's attention
    sizes = [(2, 64), (1, 300)] if quick else [(b, c) for b in (32, 64, 128) for c in (1024, 4096, 16384, 32768)]
    lines = [f"GQA decode, one layer of {n_kv_heads * group} query heads over {n_kv_heads} KV heads of {d}, "
             f"blocks of {block_size}, {str(dtype).replace('torch.', '')}; peak "
             + (f"{peak / 1e12:.2f} TB/s" if peak else "unknown")
             + "; times: split-KV kernel, exercise 1's kernel, torch SDPA on contiguous K/V"]
    for batch, context in sizes:
        (k_pool, v_pool), tables, lens = paged_batch(batch, context, n_kv_heads, (d, d), block_size, dtype, device)
        q = torch.randn(batch, n_kv_heads * group, d, device=device).to(dtype)
        kv_bytes = 2 * batch * context * n_kv_heads * d * k_pool.element_size()
        plan = decode_plan(batch * n_kv_heads, tables.shape[1] * block_size, gqa_tile(d), resident=GQA_RESIDENT[d])
        config, t = fastest(lambda **options: paged_decode_split(q, k_pool, v_pool, tables, lens, check_lengths=False,
                                                                 **options), device)
        t_one = seconds(lambda: paged_decode(q, k_pool, v_pool, tables, lens, check_lengths=False), device)
        k, v = contiguous(k_pool, tables, lens), contiguous(v_pool, tables, lens)
        t_sdpa = seconds(lambda: sdpa_decode(q, k, v), device)
        del k, v
        share = kv_bytes / t / peak if peak else float("nan")
        lines.append(f"B {batch:3d}, context {context:5d}: K/V {kv_bytes / 1e9:6.2f} GB | split-KV ({plan.num_splits:2d} "
                     f"splits) {t * 1e6:8.1f} us {kv_bytes / t / 1e9:6.0f} GB/s"
                     + (f" = {100 * share:4.1f}% of peak" if peak else "") + f" {config or '{}'}"
                     + f" | one program {t_one / t:4.2f}x its time | SDPA contiguous {t_sdpa / t:4.2f}x"
                     + (f" = {100 * kv_bytes / t_sdpa / peak:4.1f}% of peak" if peak else ""))
        if not quick and context == 4096:
            lines.append("    " + flash_attn_line(q, k_pool, v_pool, tables, lens, kv_bytes, peak, device))
            lines.append("    " + flashinfer_line(q, k_pool, v_pool, tables, lens, kv_bytes, peak, device))
        del k_pool, v_pool
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if peak:
        lines.append("GQA targets: >= 70% of peak at B >= 64 and contexts >= 4k; >= 50% at B 32 with 1k; every "
                     "size within 1.25x of SDPA's time (SDPA x < 0.80 above fails it)")
    return lines


def torch_mla_decode(q_latent, q_rope, c_kv, k_rope, scale):
    """torch's absorbed MLA on a contiguous latent, two batched matmuls around a softmax: q (B, H, d), c_kv
    (B, S, d_c), k_rope (B, S, d_r) -> (B, H, d_c)."""
    scores = (torch.bmm(q_latent, c_kv.transpose(1, 2)) + torch.bmm(q_rope, k_rope.transpose(1, 2))) * scale
    return torch.bmm(torch.softmax(scores.float(), -1).to(c_kv.dtype), c_kv)


def bench_mla(device, dtype, quick: bool) -> list[str]:
    peak, flops_peak = peak_bandwidth(device), peak_flops(device)
    n_heads, d_c, d_r, block_size = (4, 64, 16, 16) if quick else (128, 512, 64, 64)     # DeepSeek-V3, FlashMLA
    sizes = [(2, 64), (1, 300)] if quick else [(b, c) for b in (32, 64, 128) for c in (1024, 4096, 16384, 32768)]
    lines = [f"MLA decode, {n_heads} heads over one latent of {d_c} + {d_r}, blocks of {block_size}; times: the "
             f"kernel ({MLA_BLOCK_H}-head tiles), torch's batched matmuls on the contiguous latent"]
    for batch, context in sizes:
        (c_pool, r_pool), tables, lens = paged_batch(batch, context, 1, (d_c, d_r), block_size, dtype, device)
        q_latent = torch.randn(batch, n_heads, d_c, device=device).to(dtype) / 8
        q_rope = torch.randn(batch, n_heads, d_r, device=device).to(dtype) / 8
        latent_bytes = batch * context * (d_c + d_r) * c_pool.element_size()
        flops = batch * context * n_heads * (2 * (d_c + d_r) + 2 * d_c)
        plan = decode_plan(batch * -(-n_heads // MLA_BLOCK_H), tables.shape[1] * block_size, mla_tile(dtype),
                           num_warps=8, resident=MLA_RESIDENT)
        config, t = fastest(lambda **options: paged_mla_decode(q_latent, q_rope, c_pool, r_pool, tables, lens, 0.07,
                                                               check_lengths=False, **options), device)
        c_kv, k_rope = contiguous(c_pool, tables, lens)[:, 0], contiguous(r_pool, tables, lens)[:, 0]
        t_torch = seconds(lambda: torch_mla_decode(q_latent, q_rope, c_kv, k_rope, 0.07), device)
        del c_kv, k_rope
        lines.append(f"B {batch:3d}, context {context:5d}: latent {latent_bytes / 1e9:5.2f} GB | kernel "
                     f"({plan.num_splits:2d} splits) {t * 1e6:8.1f} us {flops / t / 1e12:6.1f} TFLOP/s"
                     + (f" = {100 * flops / t / flops_peak:4.1f}% of bf16 peak" if flops_peak else "")
                     + (f", {100 * latent_bytes / t / peak:4.1f}% of HBM" if peak else "") + f" {config or '{}'}"
                     + f" | torch bmm {flops / t_torch / 1e12:6.1f} TFLOP/s, {t_torch / t:4.2f}x the kernel's time")
        del c_pool, r_pool
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if peak:
        lines.append("MLA targets: >= 300 TFLOP/s at B 64-128 and contexts 4k-32k, aiming for 450; >= 2x torch's "
                     "batched matmuls (FlashMLA: 580-660 TFLOP/s on an H800)")
    return lines


def engine_workload(vocab_size: int, quick: bool) -> list[list[int]]:
    """The requests of issue 35's H200 run: 192 prompts of 16-512 random tokens (tiny with --smoke)."""
    g = torch.Generator().manual_seed(1)
    count, shortest, longest = (6, 4, 40) if quick else (192, 16, 512)
    return [torch.randint(0, vocab_size, (int(n),), generator=g).tolist()
            for n in torch.randint(shortest, longest + 1, (count,), generator=g)]


def busy_seconds(events) -> float:
    """The time the GPU was busy: the union of its kernels' and copies' intervals (they may overlap)."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy, end = 0.0, -math.inf
    for start, stop in spans:
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return busy / 1e6


def graph_seconds(engine, rows: int, repeats: int = 50) -> float | None:
    """The GPU's own time for a decode step of `rows` sequences: its CUDA graph replayed back to back between two
    CUDA events, so no host work sits between the kernels (None without graphs)."""
    graphs = engine.runner.graphs
    if graphs is None or not graphs.graphs:
        return None
    graph = graphs.graphs[graphs.size_for(rows)]
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


# Operations that launch no kernel: views are flagged by torch; these only allocate or relabel memory
NO_KERNEL = {"detach", "alias", "lift_fresh", "empty", "empty_strided", "new_empty", "set_", "_unsafe_view",
             "_reshape_alias", "promote_types", "resize_", "result_type", "empty_like"}


class KernelCount(TorchDispatchMode):
    """The operations that launch a kernel, counted while `active`, and the Triton kernels that chapter 10's
    launchers start (counted as one each, whatever the interpreter does inside them on a CPU)."""

    def __init__(self):
        super().__init__()
        self.active, self.count = False, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.active and not func.is_view and func.overloadpacket.__name__ not in NO_KERNEL:
            self.count += 1
        return func(*args, **(kwargs or {}))


def kernels_per_layer(engine) -> int:
    """Kernels a layer launches in one eager decode step, on average over the layers: counted inside each of the
    model's LlamaBlocks, or each layer of chapter 10's FusedLlamaForward when the engine runs it."""
    import attnlab.kernels.hopper as hopper
    from attnlab.kernels import fused, paged_decode, paged_mla, paged_prefill, split_kv
    counter, calls = KernelCount(), [0]

    def inside(fn):
        def counted_layer(*args, **kwargs):
            calls[0] += 1
            counter.active = True
            try:
                return fn(*args, **kwargs)
            finally:
                counter.active = False
        return counted_layer
    forward = engine.runner.model_forward
    hooks = []
    if isinstance(forward, fused.FusedLlamaForward):
        forward.layer = inside(forward.layer)                      # an instance attribute: removed below
    else:
        for layer in engine.runner.model.layers:
            hooks += [layer.register_forward_pre_hook(lambda *_: (calls.__setitem__(0, calls[0] + 1),
                                                                  setattr(counter, "active", True))),
                      layer.register_forward_hook(lambda *_: setattr(counter, "active", False))]
    launch = hopper.launch

    def counted(*args, **kwargs):
        active, counter.active = counter.active, False            # the interpreter's own work is not a kernel
        counter.count += active
        try:
            return launch(*args, **kwargs)
        finally:
            counter.active = active
    modules = (fused, paged_decode, paged_mla, paged_prefill, split_kv)
    for module in modules:
        module.launch = counted
    graphs, engine.runner.graphs = engine.runner.graphs, None            # eager: the same kernels, one by one
    try:
        with counter:
            engine.step()
    finally:
        engine.runner.graphs = graphs
        for module in modules:
            module.launch = launch
        for hook in hooks:
            hook.remove()
        vars(forward).pop("layer", None)
    return round(counter.count / max(calls[0], 1))


def decode_step_lines(engine, device, steps: int = 50) -> list[str]:
    """Decode steps of every running sequence: wall time per step over `steps` steps of the engine's loop, the
    GPU's own time per step from its graph, the busy share they give, and the kernels a layer launches."""
    rows = len(engine.running)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / steps
    gpu = graph_seconds(engine, rows) if device.type == "cuda" else None
    busy = f"GPU {gpu * 1e3:.2f} ms a step (its graph replayed), busy {gpu / wall:.0%}" if gpu else "GPU busy n/a"
    per_layer = kernels_per_layer(engine)
    return [f"  decode steps of {rows} sequences: wall {wall * 1e3:.2f} ms a step (the mean of {steps} steps in a "
            f"row), {busy} (target >= 80%); {per_layer} kernels per layer (target <= 16)"]


def bench_engine(device, quick: bool) -> list[str]:
    """Chapter 9's engine against transformers on identical requests, equal budgets (64 new tokens each, no EOS),
    greedy, on a random model of SmolLM2's shape: the engine with the kernels and CUDA graphs, without the graphs,
    transformers' continuous batching (generate_batch) and its static generate in batches of 32."""
    from transformers import GenerationConfig
    try:
        from transformers import ContinuousBatchingConfig
    except ImportError:                  # an older transformers: generate_batch then reports itself unavailable
        ContinuousBatchingConfig = None  # noqa: N806
    from attnlab.models.llama import Llama, LlamaConfig
    from attnlab.serving.engine import Engine
    from tests.llama_reference import transformers_twin
    torch.manual_seed(0)
    config = (LlamaConfig(vocab_size=64, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, n_layers=2, max_seq_len=128)
              if quick else LlamaConfig(vocab_size=49152, d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                                        n_layers=30, max_seq_len=2048, rope_theta=1e5))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = Llama(config).to(device=device, dtype=dtype).eval()
    prompts, new = engine_workload(config.vocab_size, quick), (8 if quick else 64)
    useful = len(prompts) * new
    row_counts = (4, len(prompts)) if quick else (64, 192)
    kernel = "triton"
    outputs, rate, lines = {}, {}, []

    def timed(name, fn):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        outputs[name] = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rate[name] = useful / (time.perf_counter() - start)

    def new_engine(graphs: bool, rows: int) -> Engine:
        """Built before the clock starts: capturing the graphs is a one-off cost, as a server pays it at start."""
        return Engine(model, num_blocks=64 if quick else 8192, block_size=16, max_num_seqs=rows,
                      max_num_batched_tokens=512 if quick else 8192, attention=kernel, cuda_graphs=graphs)

    def serve(engine: Engine) -> list[list[int]]:
        ids = [engine.add_request(p, new)[0] for p in prompts]
        result = engine.run()
        return [result[i] for i in ids]

    def profiled(engine: Engine) -> list[str]:
        """Decode steps of the engine's rows, once the prompts admitted first are prefilled."""
        for p in prompts[:engine.scheduler.max_num_seqs]:
            engine.add_request(p, new)
        while engine.waiting or any(s.num_computed < s.prompt_len for s in engine.running):
            engine.step()
        lines = decode_step_lines(engine, device, steps=3 if quick else 50)
        engine.run()
        return lines

    hf = transformers_twin(model.float().cpu()).to(device=device, dtype=dtype)
    model.to(device=device, dtype=dtype)
    greedy = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=-1,
                              pad_token_id=0)

    def static_generate() -> list[list[int]]:
        out = []
        for start in range(0, len(prompts), 32):
            group = prompts[start:start + 32]
            width = max(map(len, group))
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros(len(group), width, dtype=torch.long)
            for row, p in enumerate(group):                                  # left-padded
                ids[row, width - len(p):], mask[row, width - len(p):] = torch.tensor(p), 1
            tokens = hf.generate(ids.to(device), attention_mask=mask.to(device), generation_config=greedy)
            out += tokens[:, width:].tolist()
        return out

    def continuous_batching() -> list[list[int]]:
        # At tiny sizes, the engine's cache: transformers otherwise sizes its cache from the memory it finds free, and
        # on a CPU it filled gigabytes of masks for 6 requests (25 s of the smoke run).
        limits = {"continuous_batching_config": ContinuousBatchingConfig(num_blocks=64, max_batch_tokens=512)} \
            if quick else {}
        result = hf.generate_batch(prompts, greedy, progress_bar=False, **limits)
        by_prompt = {tuple(r.prompt_ids): list(r.generated_tokens) for r in result.values()}
        return [by_prompt[tuple(p)] for p in prompts]

    with torch.no_grad():
        profiles = []
        for rows in row_counts:
            profiles += profiled(new_engine(graphs=True, rows=rows))           # compiles the kernels, too
            graphed = new_engine(graphs=True, rows=rows)
            timed(f"attnlab engine, {rows} rows, Triton kernels + CUDA graphs", lambda: serve(graphed))
        eager = new_engine(graphs=False, rows=row_counts[0])
        timed(f"attnlab engine, {row_counts[0]} rows, Triton kernels, eager", lambda: serve(eager))
        for name, fn in (("transformers generate_batch (continuous batching)", continuous_batching),
                         ("transformers generate, static batches of 32", static_generate)):
            try:
                timed(name, fn)
            except Exception as error:                                      # another transformers version
                lines.append(f"  {name}: unavailable here ({type(error).__name__}: {str(error)[:120]})")
    best = f"attnlab engine, {row_counts[-1]} rows, Triton kernels + CUDA graphs"
    ours = rate[best]
    lines.insert(0, f"engine: {len(prompts)} requests of {min(map(len, prompts))}-{max(map(len, prompts))} random "
                    f"tokens, {new} new tokens each, greedy, {dtype}; useful tokens/s:")
    for name, r in rate.items():
        ratio = "" if name == best else f"; the engine at {row_counts[-1]} rows: {ours / r:.2f}x"
        lines.append(f"  {name:52s} {r:9.1f} tok/s{ratio}")
    reference = outputs.get("transformers generate_batch (continuous batching)")
    if reference is not None:
        same = sum(a == b for a, b in zip(outputs[best], reference))
        lines.append(f"  {same}/{len(prompts)} requests give generate_batch's tokens (a random model in {dtype}: "
                     f"near-ties may differ)")
    lines += profiles
    lines.append("  targets on an H200: busy >= 80%, >= 5x generate_batch, >= 10,000 tok/s (aiming for 20,000)")
    return lines


def bench_prefill(device, quick: bool) -> list[str]:
    """Prefill alone: the engine's first step over 32 prompts of 512 random tokens (every chunk in one paged prefill
    launch per layer on a GPU), beside transformers' model with SDPA attention on the same prompts, as one batch of
    equal lengths (no padding), its output layer on each prompt's last token only, as the engine's."""
    from attnlab.models.llama import Llama, LlamaConfig
    from attnlab.serving.engine import Engine
    from tests.llama_reference import transformers_twin
    torch.manual_seed(0)
    config = (LlamaConfig(vocab_size=64, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, n_layers=2, max_seq_len=128)
              if quick else LlamaConfig(vocab_size=49152, d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                                        n_layers=30, max_seq_len=2048, rope_theta=1e5))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = Llama(config).eval()
    hf = transformers_twin(model).to(device=device, dtype=dtype)
    try:
        hf.set_attn_implementation("sdpa")
    except Exception:                     # an older transformers: the twin's own choice stands, said below
        pass
    model.to(device=device, dtype=dtype)
    count, length, repeats = (3, 20, 2) if quick else (32, 512, 3)
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(0, config.vocab_size, (count, length), generator=g)
    tokens = count * length

    def engine_prefill() -> None:
        engine = Engine(model, num_blocks=count * (length // 16 + 2), block_size=16, max_num_seqs=count,
                        max_num_batched_tokens=tokens, attention="triton", cuda_graphs=False)
        for p in prompts.tolist():
            engine.add_request(p, 1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        engine.step()                                  # every prompt whole, and its first token
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    def transformers_prefill() -> None:
        ids = prompts.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        hidden = hf.model(ids).last_hidden_state
        hf.lm_head(hidden[:, -1]).argmax(-1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        engine_prefill(), transformers_prefill()       # warm-up: Triton compiles, cuBLAS picks its kernels
        ours = statistics.median(engine_prefill() for _ in range(repeats))
        theirs = statistics.median(transformers_prefill() for _ in range(repeats))
    attention = getattr(hf.config, "_attn_implementation", "?")
    return [f"prefill, {count} prompts of {length} tokens, {dtype}: the engine (paged prefill kernel) "
            f"{tokens / ours:9.0f} tok/s; transformers ({attention} attention) {tokens / theirs:9.0f} tok/s; "
            f"the engine {theirs / ours:.2f}x (target for the attention alone: within 1.5x of SDPA)"]


def bench_packed_step(device, quick: bool) -> list[str]:
    """One packed step as the engine runs it: every running sequence's decode token and a new prompt's prefill
    chunk in one forward pass, with the decodes' attention on the kernels or on torch (gathered keys)."""
    from attnlab.models.llama import Llama, LlamaConfig
    from attnlab.serving.engine import Engine
    torch.manual_seed(0)
    config = (LlamaConfig(vocab_size=64, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, n_layers=2, max_seq_len=256)
              if quick else LlamaConfig(vocab_size=49152, d_model=576, n_heads=9, n_kv_heads=3, d_ff=1536,
                                        n_layers=30, max_seq_len=4096, rope_theta=1e5))
    model = Llama(config).to(device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32).eval()
    g = torch.Generator().manual_seed(2)
    decodes, context, chunk, repeats = (3, 40, 16, 3) if quick else (64, 1024, 256, 10)
    lines = []
    for attention in ("torch", "triton"):
        engine = Engine(model, num_blocks=64 if quick else 8192, block_size=16, max_num_seqs=decodes + repeats + 1,
                        max_num_batched_tokens=decodes * context + chunk, attention=attention)
        for _ in range(decodes):
            engine.add_request(torch.randint(0, config.vocab_size, (context,), generator=g).tolist(), 4 * repeats)
        engine.step()                                                   # every prompt in one step
        times = []
        for _ in range(repeats):                                        # each step: the decodes + one new prompt
            engine.add_request(torch.randint(0, config.vocab_size, (chunk,), generator=g).tolist(), 4 * repeats)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            engine.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        step = statistics.median(times)
        lines.append(f"packed step, {decodes}+ decodes at ~{context} tokens of context + a {chunk}-token prompt, "
                     f"{attention:6s} decode attention: {step * 1e3:7.2f} ms (median of {repeats})")
    return lines


def sections(device: torch.device, smoke: bool):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    yield (f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu (interpreter)'}; "
           f"torch {torch.__version__}")
    for section in (lambda: check_correctness(device, dtype, smoke), lambda: bench_gqa(device, dtype, smoke),
                    lambda: bench_mla(device, dtype, smoke), lambda: bench_engine(device, smoke),
                    lambda: bench_prefill(device, smoke), lambda: bench_packed_step(device, smoke)):
        yield from section()            # each section's lines as soon as it is done


def run() -> list[str]:
    """`make bench`'s section: the figures on a CUDA GPU, or a line saying there is none."""
    if not torch.cuda.is_available():
        return ["no CUDA GPU here: skipped (on a GPU machine: python -m bench.gpu_paged)"]
    return list(sections(torch.device("cuda"), smoke=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, any device: checks the script itself")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        print("No CUDA GPU here: these are GPU checks (run with --smoke to try the script on a CPU).")
        return 0
    started = time.perf_counter()
    failed = False
    for line in sections(device, args.smoke):
        failed |= "FAILED" in line
        print(line, flush=True)
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
