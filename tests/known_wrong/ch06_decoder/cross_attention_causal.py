# cell: cross_attention
# loses: test_cross_attention
# why: a causal mask in cross-attention: target position i may read only source tokens 0..i
#| export attnlab/decoder_layer.py
def cross_attention(attn: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor,
                    source_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x: (B, T, d_model), the decoder's stream (queries); memory: (B, S, d_model), the encoder's output C
    (keys and values); source_mask: (B, S), True at real source tokens.
    Returns (output (B, T, d_model), weights (B, H, T, S))."""
    if source_mask is not None and source_mask.shape != memory.shape[:2]:
        raise ValueError(f"source_mask must be (B, S) = {tuple(memory.shape[:2])}, got {tuple(source_mask.shape)}")
    causal = torch.ones(x.shape[1], memory.shape[1], dtype=torch.bool).tril()
    mask = causal if source_mask is None else causal & source_mask.bool()[:, None, None, :]
    return attn(x, memory, mask=mask)
