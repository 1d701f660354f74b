# cell: transformer
# loses: test_transformer
# why: the decoder's cross-attention reads the source padding
#| export attnlab/transformer.py
@dataclass
class TransformerConfig:
    source_vocab_size: int
    target_vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 256
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    max_seq_len: int = 64
    activation: str = "relu"
    norm_first: bool = False
    eps: float = 1e-5

    def encoder_config(self) -> EncoderConfig:
        return EncoderConfig(self.source_vocab_size, self.d_model, self.n_heads, self.d_ff, self.n_encoder_layers,
                             self.max_seq_len, "sinusoidal", activation=self.activation,
                             norm_first=self.norm_first, eps=self.eps)

    def target_embedding_config(self) -> EncoderConfig:
        return EncoderConfig(self.target_vocab_size, self.d_model, self.n_heads, self.d_ff, self.n_decoder_layers,
                             self.max_seq_len, "sinusoidal", activation=self.activation,
                             norm_first=self.norm_first, eps=self.eps)


class Transformer(nn.Module):
    """The encoder-decoder Transformer: source ids (B, S) and target ids (B, T) -> logits (B, T, target vocab)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config.encoder_config())
        self.target_embeddings = Embeddings(config.target_embedding_config())
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config.d_model, config.n_heads, config.d_ff, config.activation, config.norm_first,
                         config.eps) for _ in range(config.n_decoder_layers))
        self.decoder_norm = nn.LayerNorm(config.d_model, eps=config.eps) if config.norm_first else None
        self.generator = nn.Linear(config.d_model, config.target_vocab_size)

    def encode(self, source_ids: torch.Tensor, source_mask: torch.Tensor | None = None) -> torch.Tensor:
        """source_ids: (B, S); source_mask: (B, S), True at real tokens. Returns memory C: (B, S, d_model)."""
        return self.encoder(source_ids, attention_mask=source_mask)

    def decode(self, target_ids: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor | None = None,
               target_mask: torch.Tensor | None = None) -> torch.Tensor:
        """target_ids: (B, T), starting with <bos>; memory: (B, S, d_model); masks: (B, S) and (B, T), True at
        real tokens. Returns logits (B, T, target_vocab_size): position i predicts target token i + 1."""
        x = self.target_embeddings(target_ids)                                     # (B, T, d_model)
        self_mask = decoder_self_attention_mask(target_ids.shape[1], 0, target_mask, device=target_ids.device)
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self.generator(x)

    def forward(self, source_ids: torch.Tensor, target_ids: torch.Tensor, source_mask: torch.Tensor | None = None,
                target_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.decode(target_ids, self.encode(source_ids, source_mask), source_mask, target_mask)
