"""Chapter 7: SmolLM2-135M-Instruct decoding on attnlab (as built, and prepared for decoding) against transformers'
generate on the same weights (float32, batch 1 and 8), the decode rate as a share of this machine's memory
bandwidth, MHA / GQA / MQA decoding at 4k context with d_model fixed, and SmolLM2's cache bytes per token against
the formula."""
from __future__ import annotations

import copy
import statistics
import time

import torch

from attnlab.decoding.generation import generate
from attnlab.decoding.layout import prepare_for_decoding
from attnlab.models.llama import Llama, LlamaConfig
from attnlab.weights.gguf import load_llama_gguf
from bench.timing import medians
from tests.llama_reference import transformers_twin

NEW_TOKENS = 32
ROUNDS = 5


def _read_bandwidth() -> float:
    """Bytes per second of reading a 512 MiB float32 tensor (a sum touches every byte once), best of 5."""
    x = torch.ones(128 * 2**20)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.nbytes / best


def _against_transformers(model: Llama) -> list[str]:
    """Three builds of attnlab's SmolLM2 and transformers' LlamaForCausalLM on the same weights, in interleaved
    rounds: the model as the chapter builds it, prepare_for_decoding's weight layout, and the layout with torch's
    fused attention kernel in place of the course's softmax and matmuls."""
    import transformers
    transformers.utils.logging.set_verbosity_error()
    hf = transformers_twin(model)
    builds = {"attnlab as built": model,
              "attnlab, decoding layout": prepare_for_decoding(copy.deepcopy(model)),
              "attnlab, layout + fused attention": prepare_for_decoding(copy.deepcopy(model), fused_attention=True)}
    prompt = torch.randint(0, model.config.vocab_size, (8, 24), generator=torch.Generator().manual_seed(0))
    lines = []
    bandwidth = _read_bandwidth()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    lines.append(f"this machine reads memory at {bandwidth / 1e9:.1f} GB/s (one sum over 512 MiB, best of 5)")
    with torch.no_grad():
        for batch in (1, 8):
            ids = prompt[:batch]
            runs = {name: (lambda m=m: generate(m, ids, NEW_TOKENS).tokens) for name, m in builds.items()}
            runs["transformers"] = lambda: hf.generate(ids, attention_mask=torch.ones_like(ids),
                                                       max_new_tokens=NEW_TOKENS, do_sample=False)
            seconds = {name: [] for name in runs}
            tokens = {}
            for name, run in runs.items():                                             # warm-up
                run()
            for _ in range(ROUNDS):                                                    # interleaved rounds
                for name, run in runs.items():
                    start = time.perf_counter()
                    tokens[name] = run()
                    seconds[name].append(time.perf_counter() - start)
            rate = {name: batch * NEW_TOKENS / statistics.median(s) for name, s in seconds.items()}
            lines.append(f"SmolLM2 float32, batch {batch}, {NEW_TOKENS} new tokens after 24 (median of {ROUNDS} "
                         f"interleaved rounds): transformers {rate['transformers']:.1f} tok/s")
            for name in builds:
                same = torch.equal(tokens[name], tokens["transformers"])
                lines.append(f"  {name:34s} {rate[name]:5.1f} tok/s, ratio attnlab/transformers = "
                             f"{rate[name] / rate['transformers']:.2f}x (same tokens: {same})")
            # Each decoding step reads every weight once, and each sequence's cache (a few dozen tokens here).
            cache_bytes = batch * 40 * 46_080
            step_bytes = weight_bytes + cache_bytes
            steps_per_s = max(rate[name] for name in builds) / batch
            lines.append(f"  the fastest reads {step_bytes / 1e6:.0f} MB per step: {steps_per_s * step_bytes / 1e9:.2f} "
                         f"GB/s, {steps_per_s * step_bytes / bandwidth:.0%} of this machine's read bandwidth")
    return lines


def _mha_gqa_mqa() -> list[str]:
    """One decoding step after a 4,096-token cache, d_model 512 with 8 heads of 64, 4 layers, for 8, 2 and 1 KV
    heads: the three models step in interleaved rounds (the same step again each time), medians compared."""
    context = 4096
    variants = {"MHA": 8, "GQA 4:1": 2, "MQA": 1}
    models, caches = {}, {}
    token = torch.randint(0, 1000, (1, 1), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for name, n_kv_heads in variants.items():
            torch.manual_seed(0)
            models[name] = Llama(LlamaConfig(vocab_size=1000, d_model=512, n_heads=8, n_kv_heads=n_kv_heads,
                                             d_ff=1376, n_layers=4, max_seq_len=context + 1)).eval()
            caches[name] = models[name].new_caches(1, context + 1)
            models[name](torch.randint(0, 1000, (1, context)), caches=caches[name])     # fill the cache

        def step(name: str) -> None:
            for cache in caches[name]:
                cache.length = context                                                # decode the same step again
            models[name](token, caches=caches[name])

        seconds = medians({name: (lambda name=name: step(name)) for name in variants}, repeats=30)
    lines = []
    for name, n_kv_heads in variants.items():
        per_token = sum(c.nbytes for c in caches[name]) // (context + 1)
        lines.append(f"{name:8s} (n_kv_heads {n_kv_heads}): {1 / seconds[name]:6.1f} tok/s at {context} cached "
                     f"tokens ({seconds['MHA'] / seconds[name]:.2f}x MHA's rate, median of 30 interleaved steps), "
                     f"cache {per_token:,} B per token ({per_token * context / 2**20:.0f} MiB at {context})")
    return lines


def run() -> list[str]:
    torch.set_num_threads(2)
    model, _ = load_llama_gguf(max_seq_len=512)
    c = model.config
    per_token = sum(cache.nbytes for cache in model.new_caches(1, 1))
    formula = 2 * c.n_layers * c.n_kv_heads * c.d_head * 4
    lines = [f"SmolLM2 cache bytes per token (float32): {per_token:,} measured, {formula:,} by "
             f"2 * n_layers * n_kv_heads * d_head * 4 (equal: {per_token == formula})"]
    return lines + _against_transformers(model) + _mha_gqa_mqa()
