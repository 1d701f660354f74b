# cell: multi_head_attention
# loses: test_mha_cross_and_masks
# why: in cross-attention takes the values from the query sequence (only right for self-attention)
#| export attnlab/multihead.py
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("d_model is not divisible by n_heads")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.w_v, self.w_o = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x_q, x_kv=None, mask=None):
        x_kv = x_q if x_kv is None else x_kv
        if x_q.shape[-1] != self.d_model or x_kv.shape[-1] != self.d_model or x_q.shape[0] != x_kv.shape[0]:
            raise ValueError("bad shapes")
        q = split_heads(self.w_q(x_q), self.n_heads)
        k = split_heads(self.w_k(x_kv), self.n_heads)
        v = split_heads(self.w_v(x_q), self.n_heads)
        z, weights = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(z)), weights
