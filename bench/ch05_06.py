"""Chapters 5-6: decoding speed with the KV cache vs full recomputation (256 and 1024 new tokens),
attnlab's cached generation vs transformers' GPT-2 generate on the same tiny config and weights, and the
translator's training time and held-out exact match for several seeds (plus a one-layer ablation)."""
from __future__ import annotations

import time
from dataclasses import replace

import torch

from attnlab.models.causal_lm import CausalLM, CausalLMConfig
from attnlab.decoding.generation import generate


def _tokens_per_second(model, prompt, n: int, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    out = generate(model, prompt, n, **kwargs)
    return n / (time.perf_counter() - start), out


def _cache_vs_recompute() -> list[str]:
    torch.manual_seed(0)
    config = CausalLMConfig(vocab_size=1000, d_model=256, n_heads=8, d_ff=1024, n_layers=4, max_seq_len=1100)
    model = CausalLM(config).eval()
    prompt = torch.randint(0, 1000, (1, 16))
    generate(model, prompt, 8)                                          # warm-up
    lines = []
    for n in (256, 1024):
        cached, a = _tokens_per_second(model, prompt, n)
        full, b = _tokens_per_second(model, prompt, n, use_cache=False)
        same = torch.equal(a.tokens, b.tokens)
        lines.append(f"decode {n} new tokens (d_model 256, 4 layers, batch 1): with KV cache {cached:.0f} tok/s, "
                     f"recomputing {full:.0f} tok/s, ratio cache/recompute = {cached / full:.1f}x "
                     f"(same tokens: {same})")
    return lines


def _against_gpt2_generate() -> str:
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    from attnlab.weights.gpt2 import load_gpt2
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_positions=512, n_embd=256, n_layer=4, n_head=8,
                                    activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                    bos_token_id=None, eos_token_id=None)).eval()
    ours = load_gpt2(hf)
    prompt = torch.randint(0, 1000, (1, 16))
    n = 256
    with torch.no_grad():
        hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                    pad_token_id=0)                                                       # warm-up
        generate(ours, prompt, 8)
        rates = {"attnlab": [], "transformers": []}
        for _ in range(3):                                                              # interleaved
            start = time.perf_counter()
            mine = generate(ours, prompt, n)
            rates["attnlab"].append(n / (time.perf_counter() - start))
            start = time.perf_counter()
            theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False,
                                 use_cache=True, pad_token_id=0)
            rates["transformers"].append(n / (time.perf_counter() - start))
    a, t = sorted(rates["attnlab"])[1], sorted(rates["transformers"])[1]
    return (f"greedy generation of {n} tokens, GPT-2 config (d_model 256, 4 layers) with the same weights: attnlab "
            f"{a:.0f} tok/s, transformers generate {t:.0f} tok/s, ratio attnlab/transformers = {a / t:.2f}x "
            f"(same tokens: {torch.equal(mine.tokens, theirs)}; medians of 3)")


def _translator() -> list[str]:
    import attnlab.translator.training as training
    from attnlab.translator.training import TrainingConfig, train_and_evaluate

    torch.set_num_threads(2)
    lines = []
    for seed in (0, 1, 2):
        _, _, _, r = train_and_evaluate(TrainingConfig(seed=seed), progress=False)
        lines.append(f"translator seed {seed} (2+2 layers, d_model 64, 2 threads): {r['steps']} steps in "
                     f"{r['train_seconds']:.0f} s ({r['stop_reason']}); exact match random split "
                     f"{r['random_test']:.1%}, compositional split {r['compositional_test']:.1%}")
    # Ablation: one encoder and one decoder layer, same everything else.
    original = training.translator_config
    training.translator_config = lambda s, t: replace(original(s, t), n_encoder_layers=1, n_decoder_layers=1)
    try:
        _, _, _, r = train_and_evaluate(TrainingConfig(seed=0), progress=False)
    finally:
        training.translator_config = original
    lines.append(f"translator ablation, 1+1 layers, seed 0: {r['steps']} steps in {r['train_seconds']:.0f} s; "
                 f"exact match random split {r['random_test']:.1%}, compositional split {r['compositional_test']:.1%}")
    return lines


def run() -> list[str]:
    return [*_cache_vs_recompute(), _against_gpt2_generate(), *_translator()]
