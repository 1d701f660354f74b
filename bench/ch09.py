"""Chapter 9: the KV memory a contiguous cache wastes against paging (lognormal lengths, blocks of 16); how many
sequences fit a fixed KV budget; what prefix sharing saves; the engine on SmolLM2 against static padded batches
(attnlab's generate and transformers') on one request set, in interleaved rounds; its useful FLOP/s as a share of
this machine's matmul rate and memory bandwidth, and whether a decode step is compute- or memory-bound; a serving
trace with Poisson arrivals, chunked prefill on and off; host synchronisations per decode step; the host's work per
decode step with the model stubbed out, at 64 and 192 rows of 512 tokens."""
from __future__ import annotations

import math
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from attnlab.decoding.generation import generate
from attnlab.decoding.layout import prepare_for_decoding
from attnlab.serving.engine import Engine
from attnlab.weights.gguf import load_llama_gguf
from attnlab.weights.gguf_tokenizer import chat_prompt, tokenizer_from_gguf
from tests.engine_probes import decode_host_engine, host_syncs_per_decode_step
from tests.llama_reference import transformers_twin

ROUNDS = 3                      # interleaved rounds of the engine and both static batchings; medians reported
RATES = (0.5, 1.0)              # requests per second: about half and all of what the engine serves on 2 cores
HELD_OUT = Path(__file__).resolve().parent.parent / "book" / "data" / "held_out.txt"
BLOCK_SIZE, MAX_NEW, BATCH = 16, 1024, 16
QUESTIONS = ["What is the capital of France?", "Explain how a bicycle works.", "Write a short poem about rain.",
             "What do bees make?", "Give three tips for learning a language.", "Why is the sky blue?",
             "Describe a cat in two sentences.", "What is 12 plus 30?"]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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


# ---------------------------------------------------------------------------------------------------------------
# The machine's two limits, measured in the same run as the engine
def matmul_flops() -> float:
    """FLOP/s of one float32 GEMM of 2048 x 2048 by 2048 x 2048 (2 n^3 FLOPs), median of 7."""
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    times = []
    for _ in range(7):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * 2048**3 / statistics.median(times)


def read_bandwidth() -> float:
    """Bytes per second of reading a 512 MiB float32 tensor once (a sum), median of 7."""
    x = torch.ones(128 * 2**20)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - start)
    return x.nbytes / statistics.median(times)


def _flops_per_token(config, context: float) -> float:
    """2 FLOPs per weight per token (every matrix, the output layer included; not the embedding lookup), plus
    attention: q.k and p.v, 2 * 2 * n_heads * d_head FLOPs per key attended, in every layer."""
    c = config
    per_layer = 2 * (c.d_model * c.n_heads * c.d_head + 2 * c.d_model * c.n_kv_heads * c.d_head
                     + c.n_heads * c.d_head * c.d_model + 3 * c.d_model * c.d_ff)
    return c.n_layers * (per_layer + 4 * c.n_heads * c.d_head * context) + 2 * c.d_model * c.vocab_size


# ---------------------------------------------------------------------------------------------------------------
def _workload(tokenizer, count: int = 96) -> tuple[list[list[int]], list[int]]:
    """count chat requests with lognormal output budgets (median 24 tokens, at most 96): many more requests than
    the batch holds, as a server sees them."""
    rng = np.random.default_rng(1)
    prompts = [tokenizer.encode(chat_prompt([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])).ids
               for i in range(count)]
    budgets = np.clip(rng.lognormal(math.log(24), 0.9, count).astype(int), 4, 96).tolist()
    return prompts, budgets


def _static_batches(prompts, budgets, batch: int, generate_batch) -> None:
    """Each batch left-padded and run until its longest request is done."""
    for start in range(0, len(prompts), batch):
        group, wanted = prompts[start:start + batch], budgets[start:start + batch]
        width = max(len(p) for p in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros(len(group), width, dtype=torch.bool)
        for row, p in enumerate(group):
            ids[row, width - len(p):], mask[row, width - len(p):] = torch.tensor(p), True
        generate_batch(ids, mask, max(wanted))


def _throughput(model, tokenizer) -> list[str]:
    import transformers
    transformers.utils.logging.set_verbosity_error()
    prompts, budgets = _workload(tokenizer)
    useful = sum(budgets)
    hf = transformers_twin(model)
    served: dict[str, list[list[int]]] = {}
    engines: list[Engine] = []

    # The KV memory static batching needs: each batch reserves (its longest prompt + its largest budget) tokens
    # per row in a contiguous cache. The engine given that many blocks holds every token it has and no more,
    # so more sequences fit: vLLM's comparison (Kwon et al. compare throughput at equal KV memory).
    reserved = max(len(prompts[i:i + BATCH]) * (max(map(len, prompts[i:i + BATCH])) + max(budgets[i:i + BATCH]))
                   for i in range(0, len(prompts), BATCH))
    same_memory = -(-reserved // BLOCK_SIZE)

    def engine_run(num_blocks: int, max_num_seqs: int) -> None:
        engine = Engine(model, num_blocks=num_blocks, block_size=BLOCK_SIZE, max_num_seqs=max_num_seqs)
        ids = [engine.add_request(p, n)[0] for p, n in zip(prompts, budgets)]
        result = engine.run()
        served[f"engine {max_num_seqs}"] = [result[i] for i in ids]
        engines.append(engine)

    runs = {
        "the engine, at most 16 rows (as the static batches)": lambda: engine_run(512, BATCH),
        f"the engine, the static batches' KV memory ({same_memory} blocks)": lambda: engine_run(same_memory, 4 * BATCH),
        "static padded batches (attnlab's generate)": lambda: _static_batches(
            prompts, budgets, BATCH, lambda ids, mask, n: generate(model, ids, n, attention_mask=mask)),
        "static padded batches (transformers' generate)": lambda: _static_batches(
            prompts, budgets, BATCH, lambda ids, mask, n: hf.generate(
                ids, attention_mask=mask.long(), max_new_tokens=n, min_new_tokens=n, do_sample=False)),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for _ in range(ROUNDS):                      # interleaved: a burst of other work slows one round of all
            for name, fn in runs.items():
                started = time.perf_counter()
                fn()
                seconds[name].append(time.perf_counter() - started)
        alone = [generate(model, torch.tensor([p]), n).tokens[0, len(p):].tolist()
                 for p, n in zip(prompts[:BATCH], budgets[:BATCH])]
        flops, bandwidth = matmul_flops(), read_bandwidth()
        decode_steps = _decode_step_times(model, prompts[0])
    rate = {name: useful / statistics.median(s) for name, s in seconds.items()}
    same = sum(a == b for a, b in zip(served[f"engine {BATCH}"], alone))
    same_wide = sum(a == b for a, b in zip(served[f"engine {4 * BATCH}"], alone))
    lines = [f"machine: {cpu_model()}, {torch.get_num_threads()} threads; torch {torch.__version__}",
             f"SmolLM2, {len(prompts)} chat requests of {min(budgets)}-{max(budgets)} new tokens ({useful:,} in all),"
             f" batch {BATCH}, greedy; useful tokens per second, median of {ROUNDS} interleaved rounds:"]
    static = [name for name in rate if name.startswith("static")]
    for name, r in rate.items():
        spread = ", ".join(f"{useful / s:.0f}" for s in seconds[name])
        ratios = "" if name in static else "; " + ", ".join(f"{r / rate[s]:.2f}x {s[23:-1]}'s" for s in static)
        lines.append(f"  {name:52s} {r:6.1f} tok/s (rounds: {spread}){ratios}")
    peak = max(e.stats.peak_rows for e in engines)
    lines.append(f"  target: the engine >= 2x each static batching at equal rows, >= 2.5x in their KV memory. In "
                 f"that memory, up to {peak} rows ran at once. The outputs equal generating the request alone for {same} and "
                 f"{same_wide} of the first {BATCH} requests (target: all)")
    stats = next(e.stats for e in engines if e.scheduler.max_num_seqs == BATCH)
    config = model.config
    mean_context = (statistics.mean(len(p) for p in prompts) + statistics.mean(budgets) / 2)
    work = (stats.prefill_tokens + stats.decode_tokens) * _flops_per_token(config, mean_context)
    engine_flops = work / stats.seconds
    lines.append(f"this machine: float32 matmul {flops / 1e9:.1f} GFLOP/s (one 2048^3 GEMM), memory read "
                 f"{bandwidth / 1e9:.1f} GB/s (a sum over 512 MiB); balance {flops / bandwidth:.1f} FLOP/byte")
    lines.append(f"the engine's useful work: {engine_flops / 1e9:.1f} GFLOP/s ({stats.prefill_tokens:,} prompt + "
                 f"{stats.decode_tokens:,} decode tokens x {_flops_per_token(config, mean_context) / 1e6:.0f} MFLOP "
                 f"each, over its {stats.seconds:.1f} s of steps) = {engine_flops / flops:.0%} of the GEMM rate")
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for batch, step in decode_steps.items():
        flop = batch * _flops_per_token(config, len(prompts[0]) + 8)
        bound = max(flop / flops, weight_bytes / bandwidth)
        kind = "compute" if flop / flops > weight_bytes / bandwidth else "memory"
        lines.append(f"  a decode step of {batch:2d} row{'s' if batch > 1 else ' '}: {step * 1e3:6.1f} ms; at the GEMM rate its "
                     f"{flop / 1e9:.2f} GFLOP take {flop / flops * 1e3:5.1f} ms, reading the {weight_bytes / 2**20:.0f}"
                     f" MiB of weights takes {weight_bytes / bandwidth * 1e3:5.1f} ms: {kind}-bound "
                     f"({flop / weight_bytes:.1f} FLOP/byte against a balance of {flops / bandwidth:.1f}); measured "
                     f"at {bound / step:.0%} of that bound")
    return lines


def _decode_step_times(model, prompt: list[int]) -> dict[int, float]:
    """Median seconds of the engine's decode-only steps with 1 and 16 rows running."""
    times = {}
    for rows in (1, BATCH):
        engine = Engine(model, num_blocks=512, block_size=BLOCK_SIZE, max_num_seqs=rows)
        for i in range(rows):
            engine.add_request(prompt, 40)
        engine.step()                                                       # every prefill in one step
        samples = []
        for _ in range(24):
            started = time.perf_counter()
            engine.step()
            samples.append(time.perf_counter() - started)
        times[rows] = statistics.median(samples[4:])
    return times


# ---------------------------------------------------------------------------------------------------------------
def _trace_requests(tokenizer, count: int, seed: int) -> list[tuple[list[int], int]]:
    """count requests of mixed lengths: prompts cut from chapter 7's held-out page at lognormal lengths (median 96 tokens,
    at most 1,000), outputs lognormal (median 32 tokens, at most 128); no end-of-sequence, so every request
    generates exactly its output length."""
    page = tokenizer.encode(HELD_OUT.read_text(encoding="utf-8")).ids
    text = page * (2000 // len(page) + 1)                      # the page over and over: windows of any length
    rng = np.random.default_rng(seed)
    prompt_lens = np.clip(rng.lognormal(math.log(96), 0.9, count), 8, 1000).astype(int)
    output_lens = np.clip(rng.lognormal(math.log(32), 0.6, count), 4, 128).astype(int)
    starts = rng.integers(0, len(text) - 1000, count)
    return [(text[s:s + p], int(o)) for s, p, o in zip(starts, prompt_lens, output_lens)]


def serve_trace(model, requests, rate: float, budget: int, seed: int) -> tuple[list[float], list[float]]:
    """Serve requests arriving as a Poisson process of `rate` per second, on a simulated clock that moves by each
    step's measured time (and jumps to the next arrival when nothing runs): time to first token and time per
    output token after it, per request, in seconds (vLLM's benchmark_serving defines both so)."""
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, len(requests)))
    engine = Engine(model, num_blocks=1024, block_size=BLOCK_SIZE, max_num_seqs=BATCH,
                    max_num_batched_tokens=budget)
    clock, admitted, arrived, first, last = 0.0, 0, {}, {}, {}
    while admitted < len(requests) or engine.has_unfinished():
        while admitted < len(requests) and arrivals[admitted] <= clock:
            prompt, n = requests[admitted]
            arrived[engine.add_request(prompt, n)[0]] = arrivals[admitted]
            admitted += 1
        if not engine.has_unfinished():
            clock = arrivals[admitted]
            continue
        started = time.perf_counter()
        emitted = engine.step()
        clock += time.perf_counter() - started
        for seq_id, _ in emitted:
            first.setdefault(seq_id, clock)
            last[seq_id] = clock
    ttft = [first[i] - arrived[i] for i in arrived]
    tpot = [(last[i] - first[i]) / (n - 1) for i, (_, n) in zip(arrived, requests) if n > 1]
    return ttft, tpot


def _percentiles(xs: list[float]) -> str:
    return f"p50 {np.percentile(xs, 50) * 1e3:6.0f} ms, p99 {np.percentile(xs, 99) * 1e3:6.0f} ms"


def _trace(model, tokenizer) -> list[str]:
    requests = _trace_requests(tokenizer, 32, seed=3)
    prompt_lens = [len(p) for p, _ in requests]
    lines = [f"serving trace: {len(requests)} requests, Poisson arrivals, prompts {min(prompt_lens)}-"
             f"{max(prompt_lens)} tokens (median {int(np.median(prompt_lens))}), outputs "
             f"{min(n for _, n in requests)}-{max(n for _, n in requests)} tokens, max_num_seqs {BATCH}:"]
    settings = {"chunked prefill on (budget 256 tokens)": 256, "chunked prefill off (budget 2,048 tokens)": 2048}
    with torch.no_grad():
        for rate in RATES:
            for name, budget in settings.items():
                ttft, tpot = serve_trace(model, requests, rate, budget, seed=4)
                lines.append(f"  {rate:.2f} request/s, {name:42s} TTFT {_percentiles(ttft)}; "
                             f"TPOT {_percentiles(tpot)}")
    return lines


# ---------------------------------------------------------------------------------------------------------------
def _syncs() -> list[str]:
    two, thirty = host_syncs_per_decode_step(2), host_syncs_per_decode_step(30)
    return [f"host synchronisations per decode step (torch's profiler): {two} with 2 layers, {thirty} with 30 "
            f"(target: the same; before the packed engine, 2 + 2 per layer + 13)"]


# ---------------------------------------------------------------------------------------------------------------
HOST_STEPS = 40


def _host_cost() -> list[str]:
    """What a decode step costs the host (schedule, metadata, sampling, postprocess) with the model stubbed out:
    the floor under a GPU step that no GPU can lower. nano-vllm's scheduler and decode metadata took 0.24-0.25 ms at
    64 rows and 0.68-1.25 ms at 192 on this project's CPU (measured beside attnlab's, issue 49)."""
    lines = []
    for rows in (64, 192):
        engine = decode_host_engine(rows, 512)
        times = []
        for _ in range(HOST_STEPS):
            started = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        lines.append(f"host work per decode step, {rows} rows of 512 tokens, model stubbed out: {median * 1e3:.2f} ms "
                     f"median of {HOST_STEPS} ({median / rows * 1e6:.1f} us a row; fastest {min(times) * 1e3:.2f} ms)")
    return lines


# ---------------------------------------------------------------------------------------------------------------
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


def run():
    """Each part's lines as soon as it is done (the whole takes about ten minutes on 2 cores)."""
    torch.set_num_threads(2)
    yield from _memory() + _syncs() + _host_cost()
    model, metadata = load_llama_gguf(max_seq_len=2048)
    prepare_for_decoding(model)
    tokenizer = tokenizer_from_gguf(metadata)
    for part in (_sharing, _throughput, _trace):
        started = time.perf_counter()
        yield from part(model, tokenizer)
        yield f"({part.__name__[1:]}: {time.perf_counter() - started:.0f} s)"
