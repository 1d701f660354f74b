# cell: embeddings
# loses: test_embeddings test_minilm_capstone
# why: applies BERT's LayerNorm to the token embeddings before adding positions and types
#| export attnlab/embeddings.py
@dataclass
class EncoderConfig:
    vocab_size: int
    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int
    max_seq_len: int = 512
    positions: str = "sinusoidal"       # "sinusoidal" (the paper), "learned" (BERT) or "none"
    type_vocab_size: int = 0            # BERT's segment embeddings; 0 = none
    activation: str = "relu"
    norm_first: bool = False
    eps: float = 1e-5
    scale_embeddings: bool = True       # multiply token embeddings by sqrt(d_model), as the paper does
    embedding_norm: bool = False        # LayerNorm after summing the embeddings, as BERT does

    def __post_init__(self):
        if self.positions not in ("sinusoidal", "learned", "none"):
            raise ValueError(f"positions must be 'sinusoidal', 'learned' or 'none', got {self.positions!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model = {self.d_model} is not divisible by n_heads = {self.n_heads}")


class Embeddings(nn.Module):
    """Token ids (B, T) -> input vectors (B, T, d_model)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.token = nn.Embedding(config.vocab_size, config.d_model)
        if config.positions == "learned":
            self.position = nn.Embedding(config.max_seq_len, config.d_model)
        elif config.positions == "sinusoidal":
            self.register_buffer("position", sinusoidal_positional_encoding(config.max_seq_len, config.d_model),
                                 persistent=False)
        else:
            self.position = None
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(config.d_model, eps=config.eps) if config.embedding_norm else None

    def forward(self, token_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """token_ids: (B, T) int64; token_type_ids: (B, T) or None. Returns (B, T, d_model)."""
        if token_ids.dim() != 2 or token_ids.is_floating_point():
            raise ValueError(f"token_ids must be a (B, T) integer tensor, got {token_ids.dtype} {tuple(token_ids.shape)}")
        t = token_ids.shape[1]
        if t > self.config.max_seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than max_seq_len = {self.config.max_seq_len}")
        if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must be in 0..{self.config.vocab_size - 1}, "
                             f"got {token_ids.min().item()}..{token_ids.max().item()}")
        x = self.token(token_ids)                                           # (B, T, d_model)
        if self.norm is not None:
            x = self.norm(x)
        if self.config.scale_embeddings:
            x = x * math.sqrt(self.config.d_model)
        if isinstance(self.position, nn.Embedding):
            x = x + self.position(torch.arange(t, device=token_ids.device))  # (T, d_model), broadcast over B
        elif self.position is not None:
            x = x + self.position[:t]
        if self.token_type is not None:
            types = torch.zeros_like(token_ids) if token_type_ids is None else token_type_ids
            x = x + self.token_type(types)
        return x
