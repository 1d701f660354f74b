"""Metamorphic checks of a decoder-only model that any attnlab cache must pass: cached generation equals
recomputation, and each row of a left-padded batch equals its prompt alone (chapters 7 and 8)."""
from __future__ import annotations

import torch

from attnlab.decoding.generation import generate


def assert_cached_equals_recomputed_and_padding_equals_alone(model: torch.nn.Module) -> None:
    """model: vocabulary of at least 8 tokens; 10 tokens generated after 6-token prompts, one left-padded by 3."""
    prompts = torch.tensor([[0, 0, 0, 5, 6, 7], [1, 2, 3, 4, 5, 6]])
    mask = torch.tensor([[False, False, False, True, True, True], [True] * 6])
    cached = generate(model, prompts, 10, attention_mask=mask)
    full = generate(model, prompts, 10, attention_mask=mask, use_cache=False)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.logits, full.logits, rtol=1e-5, atol=1e-5)
    for row, start in ((0, 3), (1, 0)):
        alone = generate(model, prompts[row:row + 1, start:], 10)
        assert torch.equal(alone.tokens[0, 6 - start:], cached.tokens[row, 6:])
        torch.testing.assert_close(alone.logits[0], cached.logits[row], rtol=1e-4, atol=1e-4)
