import argparse
import time
from pathlib import Path

import torch

from attnlab.decoding.layout import prepare_for_decoding
from attnlab.weights.gguf import load_llama_gguf
from attnlab.weights.gguf_tokenizer import chat_prompt, tokenizer_from_gguf
from drafts.ch09.cells.engine import Engine

# %% cell serve given
DEMO_PROMPTS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What is 12 plus 30?",
    "Give a synonym for happy.",
    "What do bees make?",
    "Translate 'good morning' into French.",
    "Which planet is closest to the sun?",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve many requests at once with SmolLM2-135M-Instruct on "
                                                 "attnlab's paged KV cache and continuous batching (greedy).")
    parser.add_argument("--prompts", type=Path, help="a text file, one prompt per line (default: a short demo)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--num-blocks", type=int, default=256, help="KV pool size, in blocks")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=16, help="sequences decoded together, at most")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = DEMO_PROMPTS if args.prompts is None else [
        line.strip() for line in args.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not prompts:
        parser.error(f"{args.prompts} holds no prompt")
    model, metadata = load_llama_gguf(max_seq_len=2048)
    prepare_for_decoding(model)
    tokenizer = tokenizer_from_gguf(metadata)
    eos_id = tokenizer.token_to_id("<|im_end|>")
    engine = Engine(model, args.num_blocks, args.block_size, args.max_num_seqs)
    ids = [engine.add_request(tokenizer.encode(chat_prompt([{"role": "user", "content": p}])).ids,
                              args.max_new_tokens, eos_id)[0] for p in prompts]
    pool = engine.manager.allocator
    print(f"{len(prompts)} requests; a pool of {pool.num_blocks} blocks of {args.block_size} tokens "
          f"({engine.pool_nbytes / 2**20:.1f} MiB)", flush=True)

    def progress(engine: Engine, emitted: list[tuple[int, int]]) -> None:
        if engine.stats.steps % 10 == 0 or not engine.has_unfinished():
            print(f"step {engine.stats.steps:4d}: {len(engine.running):2d} running, {len(engine.waiting):2d} waiting, "
                  f"{pool.num_blocks - pool.num_free:4d}/{pool.num_blocks} blocks held, "
                  f"{len(engine.finished):2d} done", flush=True)

    started = time.perf_counter()
    outputs = engine.run(progress)
    seconds = time.perf_counter() - started
    for prompt, seq_id in zip(prompts, ids):
        answer = [t for t in outputs[seq_id] if t != eos_id]
        print(f"\n> {prompt}\n{tokenizer.decode(answer).strip()}")
    generated = sum(len(tokens) for tokens in outputs.values())
    print(f"\n{generated} tokens in {seconds:.1f} s ({generated / seconds:.1f} tokens/s), "
          f"{engine.stats.preemptions} preemptions, at most {engine.stats.peak_blocks} blocks held")
    return 0


# `python -m attnlab.serve` runs main(); a notebook (also named __main__, but with no __file__) only defines it.
if __name__ == "__main__" and "__file__" in globals():
    raise SystemExit(main())
