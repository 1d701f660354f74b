# cell: feed_forward
# loses: test_feed_forward test_encoder_layer
# why: applies the activation after the second linear layer too
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
        act = torch.relu if self.activation == "relu" else torch.nn.functional.gelu
        return act(self.linear2(act(self.linear1(x))))
