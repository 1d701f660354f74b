# cell: encoder
# loses: test_encoder test_minilm_capstone
# why: shapes the padding mask (B, 1, T, 1), masking padded queries instead of padded keys
#| export attnlab/encoder.py
class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(
            EncoderLayer(config.d_model, config.n_heads, config.d_ff, config.activation, config.norm_first, config.eps)
            for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model, eps=config.eps) if config.norm_first else None

    def forward(self, token_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is not None and attention_mask.shape != token_ids.shape:
            raise ValueError("attention_mask must have the shape of token_ids")
        x = self.embeddings(token_ids, token_type_ids)
        mask = None if attention_mask is None else attention_mask.bool()[:, None, :, None]
        for layer in self.layers:
            x = layer(x, mask=mask)
        return x if self.final_norm is None else self.final_norm(x)
