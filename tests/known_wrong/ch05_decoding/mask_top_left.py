# cell: causal_mask_with_past
# loses: test_causal_mask_with_past
# why: top-left-aligned triangle: during a decoding step the new query sees only the first cached key
#| export attnlab/masks.py
def causal_mask_with_past(t_new: int, past: int = 0, device: torch.device | None = None) -> torch.Tensor:
    """(t_new, past + t_new) bool mask: new query i (absolute position past + i) may see keys 0 .. past + i."""
    if t_new < 1 or past < 0:
        raise ValueError(f"need t_new >= 1 and past >= 0, got t_new = {t_new}, past = {past}")
    query_position = torch.arange(t_new, device=device)[:, None]
    key_position = torch.arange(past + t_new, device=device)[None, :]        # (1, past + t_new)
    return key_position <= query_position


def decoder_self_attention_mask(t_new: int, past: int = 0, attention_mask: torch.Tensor | None = None,
                                device: torch.device | None = None) -> torch.Tensor:
    """Causal mask, and padding when attention_mask (B, past + t_new), True at real tokens, is given.
    Returns (t_new, past + t_new) without attention_mask, (B, 1, t_new, past + t_new) with it."""
    if attention_mask is not None:
        if attention_mask.dim() != 2 or attention_mask.shape[1] != past + t_new:
            raise ValueError(f"attention_mask must be (B, past + t_new) = (B, {past + t_new}), "
                             f"got {tuple(attention_mask.shape)}")
        device = attention_mask.device
    causal = causal_mask_with_past(t_new, past, device)                       # (t_new, past + t_new)
    if attention_mask is None:
        return causal
    return causal[None, None] & attention_mask.bool()[:, None, None, :]      # (B, 1, t_new, past + t_new)
