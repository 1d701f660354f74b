"""Measurements of the engine that both a test and `make bench` report, written once."""
from __future__ import annotations

import torch

from attnlab.models.llama import Llama, LlamaConfig
from attnlab.serving.engine import Engine


def host_syncs_per_decode_step(n_layers: int) -> int:
    """Operations that read a tensor back to the host (torch's profiler: _local_scalar_dense for item(), nonzero
    for boolean indexing) in one decode step of 6 sequences, on a random model of n_layers layers."""
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=50, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=n_layers,
                              max_seq_len=80)).eval()
    engine = Engine(model, num_blocks=64, block_size=4, max_num_seqs=8)
    for i in range(6):
        engine.add_request([1 + i, 2, 3, 4, 5], 20)
    for _ in range(3):         # past the prefill: the step profiled below decodes one token for each sequence
        engine.step()
    return host_syncs(engine.step)


def host_syncs(work) -> int:
    """The operations work() runs that read a tensor back to the host, as torch's profiler names them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        work()
    return sum(event.name in ("aten::_local_scalar_dense", "aten::nonzero") for event in prof.events())


def decode_host_engine(rows: int, context: int, block_size: int = 16) -> Engine:
    """An engine whose rows sequences have context - 8 prompt tokens prefilled and one token drawn, with its model
    stubbed out: a step schedules, builds the metadata a GPU kernel reads (a no-op stands in for the kernel),
    samples from zero logits and postprocesses. What is left is the host's work, which a GPU cannot hide."""
    from attnlab.serving.paged_cache import build_step
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=1,
                              max_seq_len=context + 64)).eval()
    engine = Engine(model, num_blocks=rows * (context // block_size + 8), block_size=block_size, max_num_seqs=rows,
                    max_num_batched_tokens=rows * context, attention=lambda *args, **kwargs: None)

    def stub_forward(batch, previous=None):
        build_step(batch.seqs, block_size, engine.runner.device, gather_decodes=False, staging=engine.runner.staging)
        return torch.zeros(len(batch.seqs), model.config.vocab_size)

    engine.runner.forward = stub_forward
    for i in range(rows):
        engine.add_request([(7 * i + j) % 60 + 3 for j in range(context - 8)], max_new_tokens=60)
    while engine.waiting or any(seq.num_generated == 0 for seq in engine.running):
        engine.step()
    return engine


def host_calls_per_decode_steps(rows: int, context: int, steps: int = 16) -> int:
    """Python function calls (C functions included) that `steps` decode steps make on the host: a count, not a time,
    so a test can hold it to O(1) per sequence whatever the context's length."""
    import sys
    engine = decode_host_engine(rows, context)
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        for _ in range(steps):
            engine.step()
    finally:
        sys.setprofile(None)
    return calls
