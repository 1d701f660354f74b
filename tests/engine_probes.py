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
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        engine.step()
    return sum(event.name in ("aten::_local_scalar_dense", "aten::nonzero") for event in prof.events())
