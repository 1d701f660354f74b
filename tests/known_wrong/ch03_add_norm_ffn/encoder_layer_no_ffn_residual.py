# cell: encoder_layer
# loses: test_encoder_layer
# why: normalises the feed-forward output without adding the residual x back
#| export attnlab/encoder_layer.py
class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, activation="relu", norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.add_norm1 = AddNorm(d_model, norm_first, eps)
        self.feed_forward = FeedForward(d_model, d_ff, activation)
        self.add_norm2 = AddNorm(d_model, norm_first, eps)

    def forward(self, x, mask=None):
        x = self.add_norm1(x, lambda h: self.self_attn(h, mask=mask)[0])
        return self.add_norm2.norm(self.feed_forward(x))
