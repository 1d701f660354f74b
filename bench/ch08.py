"""Chapter 8: absorbed against naive MLA decoding at 1k, 4k and 16k cached tokens (interleaved rounds), the cache
bytes per token of MHA, GQA, MQA and MLA at equal d_model against their formulas, and SmolLM2 converted to MLA:
cache bytes and perplexity at each latent rank, next to chapter 7's GQA and MQA."""
from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import torch

from attnlab.decoding.generation import generate
from attnlab.models.llama import Llama, LlamaConfig
from attnlab.models.mla import MLAConfig, MLAModel
from attnlab.weights.gguf import load_llama_gguf
from attnlab.weights.gguf_tokenizer import chat_prompt, tokenizer_from_gguf
from attnlab.weights.mla_conversion import gqa_to_mla

HELD_OUT = Path(__file__).resolve().parent.parent / "book" / "data" / "held_out.txt"
ROUNDS = 5


def _absorbed_against_naive() -> list[str]:
    """One decoding step of a 2-layer model (8 heads, d_c 256) after a filled latent cache."""
    config = MLAConfig(vocab_size=1000, d_model=512, n_heads=8, kv_lora_rank=256, qk_nope_head_dim=64,
                       qk_rope_head_dim=32, v_head_dim=64, d_ff=1024, n_layers=2, max_seq_len=16_400)
    torch.manual_seed(0)
    model = MLAModel(config).eval()
    lines = []
    token = torch.randint(0, 1000, (1, 1))
    with torch.no_grad():
        for context in (1024, 4096, 16_384):
            caches = model.new_caches(1, context + 1)
            for cache in caches:
                cache.append(torch.randn(1, 1, context, 256), torch.randn(1, 1, context, 32))
            seconds = {False: [], True: []}
            for _ in range(ROUNDS):
                for absorb in (False, True):
                    model.absorbed(absorb)
                    for cache in caches:
                        cache.length = context
                    start = time.perf_counter()
                    model(token, caches=caches)
                    seconds[absorb].append(time.perf_counter() - start)
            naive, absorbed = statistics.median(seconds[False]), statistics.median(seconds[True])
            lines.append(f"decode step after {context:6,d} cached tokens (2 layers, 8 heads, d_c 256): naive "
                         f"{naive * 1e3:7.1f} ms, absorbed {absorbed * 1e3:6.1f} ms, ratio naive/absorbed = "
                         f"{naive / absorbed:.1f}x")
    return lines


def _cache_bytes() -> list[str]:
    """d_model 512 with 8 heads of 64, 4 layers, float32; MLA with DeepSeek-V2's d_c = 4 d_h, d_h^R = d_h / 2."""
    d_model, n_heads, d_head, n_layers = 512, 8, 64, 4
    lines = []
    for name, n_kv_heads in (("MHA", 8), ("GQA 4:1", 2), ("MQA", 1)):
        model = Llama(LlamaConfig(vocab_size=10, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=64,
                                  n_layers=n_layers, max_seq_len=8))
        measured = sum(cache.nbytes for cache in model.new_caches(1, 1))
        formula = n_layers * 2 * n_kv_heads * d_head * 4
        lines.append(f"{name:8s} cache {measured:6,d} B per token, formula 2 * n_kv_heads * d_h * 4 * n_layers = "
                     f"{formula:6,d} (equal: {measured == formula})")
    mla = MLAModel(MLAConfig(vocab_size=10, d_model=d_model, n_heads=n_heads, kv_lora_rank=4 * d_head,
                             qk_nope_head_dim=d_head, qk_rope_head_dim=d_head // 2, v_head_dim=d_head, d_ff=64,
                             n_layers=n_layers, max_seq_len=8))
    measured = sum(cache.nbytes for cache in mla.new_caches(1, 1))
    formula = n_layers * (4 * d_head + d_head // 2) * 4
    lines.append(f"{'MLA':8s} cache {measured:6,d} B per token, formula (d_c + d_h^R) * 4 * n_layers = "
                 f"{formula:6,d} (equal: {measured == formula})")
    return lines


def _converted_smollm2() -> list[str]:
    smollm2, metadata = load_llama_gguf(max_seq_len=2048)
    tokenizer = tokenizer_from_gguf(metadata)
    ids = torch.tensor([tokenizer.encode(HELD_OUT.read_text(encoding="utf-8")).ids])

    def perplexity(model) -> float:
        with torch.no_grad():
            return math.exp(torch.nn.functional.cross_entropy(model(ids)[0, :-1], ids[0, 1:]).item())

    def cache_bytes(model) -> int:
        return sum(cache.nbytes for cache in model.new_caches(1, 1))

    mqa = Llama(LlamaConfig(**{**smollm2.config.__dict__, "n_kv_heads": 1})).eval()
    state = smollm2.state_dict()
    for name in [n for n in state if ".attn.w_k." in n or ".attn.w_v." in n]:
        state[name] = state[name].view(3, 64, -1).mean(0)
    mqa.load_state_dict(state)
    questions = ["Tell me about the history of Rome.", "Explain how a bicycle works.",
                 "Write a short story about a cat.", "What should I know before adopting a dog?"]
    calibration = torch.stack([generate(smollm2, torch.tensor([tokenizer.encode(chat_prompt(
        [{"role": "user", "content": q}])).ids[:16]]), 96).tokens[0] for q in questions])
    rows = [("GQA, 3 KV heads (as trained)", smollm2), ("MQA, mean of the 3 heads", mqa)]
    for rope_pairs, rank in ((32, 192), (16, 192), (16, 96), (8, 128), (8, 64)):
        rows.append((f"MLA, {rope_pairs} rotary pairs, d_c {rank}, calibrated",
                     gqa_to_mla(smollm2, rope_pairs, rank, calibration)))
    lines = [f"SmolLM2 on the held-out page ({ids.shape[1]} tokens), no training:"]
    for name, model in rows:
        lines.append(f"  {name:44s} {cache_bytes(model):7,d} B per token, perplexity {perplexity(model):9.1f}")
    return lines


def run() -> list[str]:
    torch.set_num_threads(2)
    return _absorbed_against_naive() + _cache_bytes() + _converted_smollm2()
