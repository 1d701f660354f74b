# cell: feed_forward
# loses: test_feed_forward test_encoder_layer
# why: the tanh approximation of GELU instead of the exact (erf) one BERT uses
#| export attnlab/feedforward.py
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, activation="relu", bias=True):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError("unknown activation")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        h = self.linear1(x)
        h = torch.relu(h) if self.activation == "relu" else torch.nn.functional.gelu(h, approximate="tanh")
        return self.linear2(h)
