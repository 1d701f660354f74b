# cell: cross_attention
# loses: test_cross_attention
# why: queries from the encoder and keys and values from the decoder (the arguments swapped)
#| export attnlab/decoder_layer.py
def cross_attention(attn: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor,
                    source_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x: (B, T, d_model), the decoder's stream (queries); memory: (B, S, d_model), the encoder's output C
    (keys and values); source_mask: (B, S), True at real source tokens.
    Returns (output (B, T, d_model), weights (B, H, T, S))."""
    if source_mask is not None and source_mask.shape != memory.shape[:2]:
        raise ValueError(f"source_mask must be (B, S) = {tuple(memory.shape[:2])}, got {tuple(source_mask.shape)}")
    mask = None if source_mask is None else source_mask.bool()[:, None, None, :]     # (B, 1, 1, S)
    return attn(memory, x, mask=None if source_mask is None else source_mask.bool()[:, None, :, None])
