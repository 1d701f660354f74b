"""Build solutions/ch09_paged/ch09_paged.ipynb from cells/*.py and tests_cells.py: python -m drafts.ch09.build"""
import re
from pathlib import Path

import nbformat

from drafts.ch09.tests_cells import TESTS

HERE = Path(__file__).parent
REPO = HERE.parents[1]
OUT = REPO / "solutions" / "ch09_paged" / "ch09_paged.ipynb"
MODULES = {"block_allocator": "attnlab/serving/block_allocator.py", "block_table": "attnlab/serving/block_table.py",
           "paged_kv": "attnlab/serving/paged_kv.py", "copy_on_write": "attnlab/serving/copy_on_write.py",
           "prefix_cache": "attnlab/serving/prefix_cache.py", "block_manager": "attnlab/serving/block_manager.py",
           "scheduler": "attnlab/serving/scheduler.py", "paged_cache": "attnlab/serving/paged_cache.py",
           "engine": "attnlab/serving/engine.py", "serve": "attnlab/serve.py"}


def cells_of(module: str) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """(external import lines, {label: (kind, code)})."""
    text = (HERE / "cells" / f"{module}.py").read_text()
    head, *parts = re.split(r"^# %% cell ", text, flags=re.M)
    imports = [line for line in head.splitlines() if line.startswith(("import ", "from ")) and "drafts." not in line]
    cells = {}
    for part in parts:
        first, _, code = part.partition("\n")
        label, kind = first.split()
        cells[label] = (kind, code.strip("\n"))
    return imports, cells


MD = {}
MD["intro"] = r"""# Chapter 9 exercises: PagedAttention, continuous batching and a serving engine

A KV cache reserved whole for each sequence wastes most of its memory. vLLM's answer is to page it: keys and values
live in fixed-size **blocks** of one shared pool, and each sequence's **block table** lists its blocks, as a page
table lists a process's pages. You will write:

1. `BlockAllocator`: the free blocks and a reference count per block,
2. `slot_mapping` and `append_slot`: from a token's position to its physical slot, opening blocks as needed,
3. `write_paged`: storing new keys and values in their slots (vLLM's `reshape_and_cache`),
4. `gather_paged`: reading a batch of sequences' keys back through their tables, for attention,
5. `fork` and `copy_on_write`: sequences that share blocks until one of them writes,
6. `cache_full_blocks` and `match_prefix`: the prefix cache, full blocks under chained hashes,
7. `schedule`: one iteration of continuous batching, with preemption when blocks run out.

Then the given `Engine` puts them together and serves SmolLM2-135M-Instruct to many requests at once. Everything
from earlier chapters comes from the course's reference `attnlab`. Where a test needs another exercise of this
chapter, it uses a small stand-in written in the test, so each exercise is graded on its own.

**Conventions.** The pool of one layer is `(num_blocks, block_size, n_kv_heads, d_head)` for keys and the same for
values. **Slot** `s` is row `s` of the pool seen as `(num_blocks * block_size, n_kv_heads, d_head)`, so position
`p` of a sequence with table `t` is slot `t[p // block_size] * block_size + p % block_size`. A batch read back from
the pool is left-padded, as chapter 5 pads prompts: each row's tokens end the row."""
MD["allocator"] = r"""## 1. The block allocator

A block is held by one or more block tables; `ref_counts[b]` says by how many. `allocate` hands out a free block
(held once), `share` adds a holder, and `free` removes one: the block is free again when its count reaches 0.
Keep the free blocks in `free_ids`, an `OrderedDict` used as a queue: take from the front
(`popitem(last=False)`), put freed blocks at the back. Exercise 6 keeps the contents of freed blocks findable,
so the least recently freed block must be the first reused, and `evict` (given) must be called on the block you
hand out. `share` and `free` of a block nobody holds must raise `ValueError` (`check_held` does it);
`allocate` with nothing free raises `OutOfBlocks`."""
MD["block_table"] = r"""## 2. Block tables and the slot mapping

`slot_mapping(block_table, positions, block_size)` turns a sequence's token positions into slots (`int64`),
with `ValueError` for a position outside the table. `append_slot(block_table, num_tokens, block_size, allocator)`
reserves the slot of the next token, at position `num_tokens`: a table of `num_tokens` tokens holds exactly
`ceil(num_tokens / block_size)` blocks (`ValueError` otherwise), and the token at a multiple of `block_size` opens a
new one, taken from `allocator.allocate()`."""
MD["write"] = r"""## 3. Writing keys and values into the pool

`write_paged(k_pool, v_pool, k, v, slot_mapping)` stores `N` new tokens' keys and values, `(N, n_kv_heads, d_head)`,
in slots `slot_mapping` `(N,)`: one indexed assignment into a view of each pool. (The two pools are alike here;
chapter 8's MLA keeps its latent in one and its rotary key in the other, so let each have its own last two
sizes.) Raise `ValueError`, before writing anything, for pools that are not contiguous or not of the same
`(num_blocks, block_size)`, keys or values of the wrong shape or dtype, or a
slot outside the pool."""
MD["gather"] = r"""## 4. Paged attention: the gather

`gather_paged(pool, block_tables, context_lens)` reads `B` sequences back: `block_tables` `(B, max_blocks)` (row
`b`'s first `ceil(len_b / block_size)` entries are its blocks; what follows is padding, never to be read) and
`context_lens` `(B,)`. It returns `(B, n_kv_heads, S, d_head)` with `S = max(context_lens)`: row `b`'s tokens
`0 .. len_b - 1` in its last `len_b` columns and zeros before them. Read only real slots: the tests fill every
unused slot with NaN, and a NaN multiplied by a zero attention weight is still NaN. Raise `ValueError` for a length
below 1 or beyond the table, and for a table entry outside the pool. The given `paged_attention` then attends
each sequence's newest query over its gathered keys, with chapter 7's grouped-query attention."""
MD["cow"] = r"""## 5. Fork and copy-on-write

Parallel sampling and beam search continue one prompt in several ways. `fork(block_table, allocator)` gives the
child a new table with the parent's blocks, each shared once more: nothing is copied. Then, before a token is
written, `copy_on_write(block_table, num_tokens, block_size, allocator)` checks where it goes: into the last block
(unless `num_tokens` is a multiple of `block_size`, when the token opens a new block) and, if another table holds
that block too, this table gets a new block in its place and drops its hold on the shared one. It returns
`(source, destination)` so that the engine copies the block's keys and values in every layer, or `None`."""
MD["prefix"] = r"""## 6. The prefix cache

Requests often start alike (a system prompt, a conversation so far). Once a block is full, its keys and values
are fixed by the tokens in it and before it, so they can be reused. `cache_full_blocks(token_ids, block_table,
block_size, allocator)` enters each full block not entered yet into `allocator.cached` (hash to block id), with
`block_hashes` (block id to hash) and `block_tokens` beside it. Hash block `i` with the given `block_hash`, chained
to block `i - 1`'s hash (`None` for the first), as vLLM and nano-vllm do. Never enter a partial block.
`match_prefix(token_ids, block_size, allocator)` returns the cached blocks of the longest run of a prompt's full
blocks from its start, calling `allocator.revive` on each, and stops at the first miss, or at a hit whose stored
tokens differ (a hash collision). The block that holds the prompt's last token is never matched, because that
token must be computed to give the next token's logits."""
MD["manager"] = r"""## 7. The scheduler

The given `BlockManager` puts exercises 1-6 together for whole sequences, and `Sequence` holds a request's tokens.
Continuous batching (Orca, OSDI 2022) schedules one iteration at a time, so requests join and leave between
steps while others decode. `schedule` makes one such decision, prefills first, as vLLM's first scheduler did. Its
docstring gives the rules. Preemption frees a sequence's blocks and requeues it: when it runs again, a prefill
recomputes its keys and values from its tokens, the prompt and what it had generated."""
MD["engine"] = r"""## 8. The engine (given)

`PagedCache` is one layer's pool behind chapter 5's cache interface: chapter 7's `Llama` runs on it unchanged.
Each step, the engine lays the scheduled sequences out as a left-padded batch (`StepLayout`). Their new tokens
are written into their slots and the keys and values are read back through the block tables. `Engine` loops:
schedule, copy-on-write, one forward pass, sample. `python -m attnlab.serve` serves a file of prompts with it."""
MD["done"] = r"""## Done

Restart the kernel and run all cells. `make export` then adds `attnlab/serving/` (the allocator, block tables,
copy-on-write, the prefix cache, paged write and gather, the block manager, the scheduler, the paged cache and the
engine) and `attnlab/serve.py` to your own package: `python -m attnlab.serve` then serves SmolLM2 on your code."""

DEMO = r'''# The grader sets ATTNLAB_GRADING: this cell grades nothing, and would load SmolLM2 for every submission.
if os.environ.get("ATTNLAB_GRADING"):
    print("The engine's demo is skipped while grading.")
else:
    from attnlab.decoding.generation import generate
    from attnlab.models.llama import Llama, LlamaConfig

    torch.manual_seed(0)
    tiny = Llama(LlamaConfig(vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=2, max_seq_len=96))
    tiny = tiny.double().eval()
    prompts = [torch.randint(0, 64, (n,)).tolist() for n in (3, 17, 9, 30, 5, 12)]
    engine = Engine(tiny, num_blocks=14, block_size=4, max_num_seqs=4)       # too few blocks for all at once
    ids = [engine.add_request(p, 20)[0] for p in prompts]
    outputs = engine.run()
    alone = [generate(tiny, torch.tensor([p]), 20).tokens[0, len(p):].tolist() for p in prompts]
    print(f"{len(prompts)} requests in {engine.stats.steps} steps, {engine.stats.preemptions} preemptions; every "
          f"output equals generating it alone: {all(outputs[i] == a for i, a in zip(ids, alone))}")
    main(["--max-new-tokens", "24"])'''


def code_cell(source: str, grade_id: str | None = None, solution: bool = False, points: int | None = None):
    cell = nbformat.v4.new_code_cell(source)
    if grade_id is not None:
        meta = {"grade": points is not None, "grade_id": grade_id, "locked": not solution, "schema_version": 3,
                "solution": solution, "task": False}
        if points is not None:
            meta["points"] = points
        cell.metadata["nbgrader"] = meta
        if not solution:
            cell.metadata.update(deletable=False, editable=False)
    return cell


def build() -> None:
    imports, cells, where = [], {}, {}
    for module, target in MODULES.items():
        lines, found = cells_of(module)
        imports += [line for line in lines if line not in imports]
        for label, value in found.items():
            cells[label], where[label] = value, target

    def export(label: str):
        kind, code = cells[label]
        return code_cell(f"#| export {where[label]}\n{code}", label, solution=kind == "solution")

    def test(grade_id: str):
        points, source = TESTS[grade_id]
        return code_cell(source, grade_id, points=points)

    merged: dict[str, set[str]] = {}
    for line in [line for line in imports if line.startswith("from ")]:
        module, names = line[len("from "):].split(" import ")
        merged.setdefault(module, set()).update(name.strip() for name in names.split(","))
    # One name a line: the sync keeps, in each module, only the import lines it uses.
    imports = [line for line in imports if line.startswith("import ")] + [
        f"from {module} import {name}" for module, names in merged.items() for name in sorted(names)]
    md = nbformat.v4.new_markdown_cell
    third_party = ("import torch", "from torch")
    standard = sorted({"import os", *(line for line in imports if not line.startswith(third_party)
                                      and "attnlab" not in line)}, key=lambda line: (line.startswith("from"), line))
    torch_lines = sorted(line for line in imports if line.startswith(third_party))
    ours = sorted(line for line in imports if line.startswith("from attnlab"))
    header = "\n".join(["#| export " + " ".join(MODULES.values()), *standard, "", *torch_lines, "", *ours])
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [
        md(MD["intro"]), code_cell(header, "imports"),
        code_cell("# One thread: on a busy 2-core machine, two threads made small matmuls 10-30 times slower.\n"
                  "torch.set_num_threads(1)", "threads"),
        md(MD["allocator"]), export("out_of_blocks"), export("block_allocator"), test("test_block_allocator"),
        md(MD["block_table"]), export("block_table"), test("test_block_table"),
        md(MD["write"]), export("write_paged"), test("test_write_paged"),
        md(MD["gather"]), export("gather_paged"), export("paged_attention"), test("test_gather_paged"),
        md(MD["cow"]), export("copy_on_write"), test("test_copy_on_write"),
        md(MD["prefix"]), export("block_hash"), export("prefix_cache"), test("test_prefix_cache"),
        md(MD["manager"]), export("block_manager"), export("scheduler"), test("test_schedule"),
        md(MD["engine"]), export("paged_cache"), export("engine"), export("serve"), code_cell(DEMO),
        md(MD["done"]),
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, OUT)
    print(f"wrote {OUT.relative_to(REPO)}: {len(nb.cells)} cells, "
          f"{sum(p for p, _ in TESTS.values())} points")


if __name__ == "__main__":
    build()
