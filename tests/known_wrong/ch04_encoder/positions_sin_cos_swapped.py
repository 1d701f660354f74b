# cell: sinusoidal_positional_encoding
# loses: test_sinusoidal_positional_encoding
# why: cosines in the even columns and sines in the odd ones
#| export attnlab/embeddings.py
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0 or d_model <= 0 or max_len <= 0:
        raise ValueError("need an even d_model")
    angle = torch.arange(max_len)[:, None] / 10000.0 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.empty(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.cos(angle), torch.sin(angle)
    return pe
