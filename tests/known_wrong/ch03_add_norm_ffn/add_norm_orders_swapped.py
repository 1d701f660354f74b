# cell: add_norm
# loses: test_add_norm test_encoder_layer
# why: the pre-norm and post-norm branches are swapped
#| export attnlab/norm.py
class AddNorm(nn.Module):
    def __init__(self, d_model, norm_first=False, eps=1e-5):
        super().__init__()
        self.norm = LayerNorm(d_model, eps)
        self.norm_first = norm_first

    def forward(self, x, sublayer):
        if not self.norm_first:
            return x + sublayer(self.norm(x))
        return self.norm(x + sublayer(x))
