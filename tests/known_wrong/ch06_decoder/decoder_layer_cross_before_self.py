# cell: decoder_layer
# loses: test_decoder_layer
# why: cross-attention before masked self-attention
#| export attnlab/decoder_layer.py
class DecoderLayer(nn.Module):
    """One Transformer decoder layer (Vaswani et al. 2017, section 3.1)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, activation: str = "relu",
                 norm_first: bool = False, eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.add_norm1 = AddNorm(d_model, norm_first, eps)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.add_norm2 = AddNorm(d_model, norm_first, eps)
        self.feed_forward = FeedForward(d_model, d_ff, activation)
        self.add_norm3 = AddNorm(d_model, norm_first, eps)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                source_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d_model) target stream; memory: (B, S, d_model) encoder output. Returns (B, T, d_model)."""
        x = self.add_norm1(x, lambda h: cross_attention(self.cross_attn, h, memory, source_mask)[0])
        x = self.add_norm2(x, lambda h: self.self_attn(h, mask=self_mask)[0])
        return self.add_norm3(x, self.feed_forward)
