"""Chapter 9: the KV memory a contiguous cache wastes against paging (lognormal lengths, blocks of 16); how many
sequences fit a fixed KV budget, paged against contiguous reservation; the engine's throughput on SmolLM2 for one
mixed-length request set, with continuous batching, static padded batches, one request at a time and
transformers' generate on the same static batches; and what prefix sharing saves, for a shared system prompt and
for 4-way sampling."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from attnlab.decoding.generation import generate
from attnlab.decoding.layout import prepare_for_decoding
from attnlab.serving.engine import Engine
from attnlab.weights.gguf import load_llama_gguf
from attnlab.weights.gguf_tokenizer import chat_prompt, tokenizer_from_gguf
from tests.llama_reference import transformers_twin

ROUNDS = 2                      # alternating runs of the engine and of static batching
HELD_OUT = Path(__file__).resolve().parent.parent / "book" / "data" / "held_out.txt"
BLOCK_SIZE, MAX_NEW = 16, 1024
QUESTIONS = ["What is the capital of France?", "Explain how a bicycle works.", "Write a short poem about rain.",
             "What do bees make?", "Give three tips for learning a language.", "Why is the sky blue?",
             "Describe a cat in two sentences.", "What is 12 plus 30?"]


def _lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lognormal prompt and output lengths (medians 160 and 120, capped at 1,024), and each request's current
    length at a random point of its generation."""
    rng = np.random.default_rng(seed)
    prompt = np.clip(rng.lognormal(math.log(160), 1.0, n).astype(int), 1, 1024)
    output = np.clip(rng.lognormal(math.log(120), 1.0, n).astype(int), 1, MAX_NEW)
    return prompt, output, prompt + (rng.random(n) * output).astype(int)


def _memory() -> list[str]:
    prompt, _, now = _lengths(4000)
    paged = np.ceil(now / BLOCK_SIZE) * BLOCK_SIZE
    contiguous = prompt + MAX_NEW
    paged_waste, contiguous_waste = 1 - now.sum() / paged.sum(), 1 - now.sum() / contiguous.sum()
    lines = [f"KV memory wasted, 4,000 requests part way through (lognormal lengths): paged, blocks of {BLOCK_SIZE}: "
             f"{paged_waste:.1%} (target <= 4%); contiguous, prompt + {MAX_NEW}-token limit reserved: "
             f"{contiguous_waste:.1%}; ratio contiguous/paged = {contiguous_waste / paged_waste:.1f}x"]
    budget = 2**20                                                   # token slots of KV memory
    fits = {name: int(np.searchsorted(np.cumsum(held), budget, side="right"))
            for name, held in (("paged", paged), ("contiguous", contiguous))}
    lines.append(f"sequences that fit {budget:,} KV token slots: paged {fits['paged']:,}, contiguous "
                 f"{fits['contiguous']:,}; ratio paged/contiguous = {fits['paged'] / fits['contiguous']:.2f}x "
                 f"(target >= 2.5x)")
    return lines


def _workload(tokenizer, count: int = 96) -> tuple[list[list[int]], list[int]]:
    """count chat requests with lognormal output budgets (median 24 tokens, at most 96): many more requests than
    the batch holds, as a server sees them."""
    rng = np.random.default_rng(1)
    prompts = [tokenizer.encode(chat_prompt([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])).ids
               for i in range(count)]
    budgets = np.clip(rng.lognormal(math.log(24), 0.9, count).astype(int), 4, 96).tolist()
    return prompts, budgets


def _static_batches(prompts, budgets, batch: int, generate_batch) -> int:
    """Each batch left-padded and run until its longest request is done; returns the useful tokens."""
    useful = 0
    for start in range(0, len(prompts), batch):
        group, wanted = prompts[start:start + batch], budgets[start:start + batch]
        width = max(len(p) for p in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros(len(group), width, dtype=torch.bool)
        for row, p in enumerate(group):
            ids[row, width - len(p):], mask[row, width - len(p):] = torch.tensor(p), True
        generate_batch(ids, mask, max(wanted))
        useful += sum(wanted)
    return useful


def _throughput(model, tokenizer) -> list[str]:
    import transformers
    transformers.utils.logging.set_verbosity_error()
    prompts, budgets = _workload(tokenizer)
    batch = 16
    useful = sum(budgets)
    seconds: dict[str, float] = {}
    served: list[list[int]] = []

    def continuous() -> list[list[int]]:
        engine = Engine(model, num_blocks=512, block_size=BLOCK_SIZE, max_num_seqs=batch)
        for p, n in zip(prompts, budgets):
            engine.add_request(p, n)
        return engine.run()

    def static() -> None:
        _static_batches(prompts, budgets, batch, lambda ids, mask, n: generate(model, ids, n, attention_mask=mask))

    # The ratio with a target: the two runs alternate, ROUNDS times, and each keeps its fastest, so that a burst of
    # other work on the machine slows one round of both rather than one of them.
    with torch.no_grad():
        for _ in range(ROUNDS):
            for name, fn in (("continuous batching (attnlab's engine)", continuous),
                             ("static padded batches (attnlab's generate)", static)):
                started = time.perf_counter()
                served = fn() or served
                elapsed = time.perf_counter() - started
                seconds[name] = min(seconds.get(name, elapsed), elapsed)
        hf = transformers_twin(model)
        started = time.perf_counter()
        _static_batches(prompts, budgets, batch, lambda ids, mask, n: hf.generate(
            ids, attention_mask=mask.long(), max_new_tokens=n, min_new_tokens=n, do_sample=False))
        seconds["static padded batches (transformers' generate)"] = time.perf_counter() - started
        started = time.perf_counter()                                 # the first batch's worth: slow
        alone = [generate(model, torch.tensor([p]), n).tokens[0, len(p):].tolist()
                 for p, n in zip(prompts[:batch], budgets[:batch])]
        seconds["one request at a time (attnlab's generate)"] = time.perf_counter() - started
    same = sum(served[i] == a for i, a in enumerate(alone))
    rate = {name: useful / s for name, s in seconds.items()}
    rate["one request at a time (attnlab's generate)"] = sum(budgets[:batch]) / seconds[
        "one request at a time (attnlab's generate)"]
    base = rate["static padded batches (attnlab's generate)"]
    lines = [f"SmolLM2, {len(prompts)} chat requests of {min(budgets)}-{max(budgets)} new tokens ({useful:,} in all), "
             f"batch {batch}, greedy; useful tokens per second (the first two: best of {ROUNDS} alternating runs):"]
    for name, r in rate.items():
        lines.append(f"  {name:48s} {r:6.1f} tok/s, ratio to static batching = {r / base:.2f}x")
    lines.append(f"  (one at a time: timed on the first {batch} requests.) The engine's outputs equal generating the "
                 f"request alone for {same} of those {batch} (target: all); target: continuous batching >= 2x static")
    return lines


def _sharing(model, tokenizer) -> list[str]:
    system = " ".join(HELD_OUT.read_text(encoding="utf-8").split()[:220])
    chats = [tokenizer.encode(chat_prompt([{"role": "user", "content": q}], system=system)).ids for q in QUESTIONS]
    lines = []
    runs = {}
    for caching in (False, True):
        engine = Engine(model, num_blocks=512, block_size=BLOCK_SIZE, max_num_seqs=16, prefix_caching=caching)
        for chat in chats:
            engine.add_request(chat, 1)                               # one token: the prefill is what is measured
        started = time.perf_counter()
        engine.run()
        runs[caching] = (time.perf_counter() - started, engine.stats)
    (t_off, off), (t_on, on) = runs[False], runs[True]
    lines.append(f"a {len(chats[0]) - len(tokenizer.encode(chat_prompt([{'role': 'user', 'content': ''}])).ids)}"
                 f"-token shared system prompt, {len(chats)} requests: prefix caching prefills {on.prefill_tokens:,} "
                 f"tokens against {off.prefill_tokens:,}, holds at most {on.peak_blocks} blocks against "
                 f"{off.peak_blocks} ({1 - on.peak_blocks / off.peak_blocks:.0%} of memory saved) and takes "
                 f"{t_on:.2f} s against {t_off:.2f} s ({1 - t_on / t_off:.0%} of prefill time saved)")
    prompt = chats[0]
    peak = {}
    for shared in (False, True):
        engine = Engine(model, num_blocks=512, block_size=BLOCK_SIZE, prefix_caching=False)
        if shared:
            engine.add_request(prompt, 64, n=4, temperature=1.0)
        else:
            for i in range(4):
                engine.add_request(prompt, 64, temperature=1.0, seed=i)
        engine.run()
        peak[shared] = engine.stats.peak_blocks
    lines.append(f"4-way sampling of a {len(prompt)}-token prompt, 64 tokens each: at most {peak[True]} blocks held "
                 f"with fork and copy-on-write, {peak[False]} as separate requests "
                 f"({1 - peak[True] / peak[False]:.0%} of memory saved)")
    return lines


def run() -> list[str]:
    torch.set_num_threads(2)
    lines = _memory()
    model, metadata = load_llama_gguf(max_seq_len=2048)
    prepare_for_decoding(model)
    tokenizer = tokenizer_from_gguf(metadata)
    return lines + _sharing(model, tokenizer) + _throughput(model, tokenizer)
