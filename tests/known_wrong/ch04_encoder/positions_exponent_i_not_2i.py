# cell: sinusoidal_positional_encoding
# loses: test_sinusoidal_positional_encoding
# why: 10000^(i / d_model) with the pair index i instead of 2i: frequencies decay half as fast
#| export attnlab/embeddings.py
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0 or d_model <= 0 or max_len <= 0:
        raise ValueError("need an even d_model")
    angle = torch.arange(max_len)[:, None] / 10000.0 ** (torch.arange(d_model // 2) / d_model)
    pe = torch.empty(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe
