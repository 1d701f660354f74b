# cell: greedy_translate
# loses: test_greedy_translate
# why: chooses each token from the logits of the first target position instead of the last
#| export attnlab/translate.py
@torch.no_grad()
def greedy_translate(model: nn.Module, source_ids: torch.Tensor, source_mask: torch.Tensor | None = None,
                     max_len: int = 16, bos_id: int = 1, eos_id: int = 2) -> torch.Tensor:
    """source_ids: (B, S). Returns (B, n) target token ids, n <= max_len, without <bos>."""
    if source_ids.dim() != 2 or source_ids.shape[1] == 0:
        raise ValueError(f"source_ids must be (B, S) with S >= 1, got shape {tuple(source_ids.shape)}")
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    memory = model.encode(source_ids, source_mask)                          # (B, S, d_model), once
    batch_size = source_ids.shape[0]
    target = torch.full((batch_size, 1), bos_id, dtype=torch.long, device=source_ids.device)
    finished = torch.zeros(batch_size, dtype=torch.bool, device=source_ids.device)
    for _ in range(max_len):
        logits = model.decode(target, memory, source_mask)[:, 0]
        token = torch.where(finished, eos_id, logits.argmax(dim=-1))
        target = torch.cat([target, token[:, None]], dim=1)
        finished |= token == eos_id
        if finished.all():
            break
    return target[:, 1:]
