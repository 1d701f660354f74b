# cell: generate
# loses: test_generate
# why: stops the whole batch as soon as any row has produced eos_id
#| export attnlab/generation.py
@dataclass
class Generation:
    tokens: torch.Tensor        # (B, T + n): the prompt, then the n new tokens
    logits: torch.Tensor        # (B, n, vocab): the logits at each step (a finished row's eos is forced, not chosen)


@torch.no_grad()
def generate(model: CausalLM, prompt_ids: torch.Tensor, max_new_tokens: int,
             attention_mask: torch.Tensor | None = None, use_cache: bool = True, eos_id: int | None = None,
             temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None) -> Generation:
    """Extend each (left-padded) prompt of prompt_ids (B, T) by up to max_new_tokens tokens."""
    if prompt_ids.dim() != 2 or prompt_ids.shape[1] == 0:
        raise ValueError(f"prompt_ids must be (B, T) with T >= 1, got shape {tuple(prompt_ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    batch_size, t_prompt = prompt_ids.shape
    if t_prompt + max_new_tokens > model.config.max_seq_len:
        raise ValueError(f"a prompt of {t_prompt} tokens plus {max_new_tokens} new ones exceeds the model's "
                         f"max_seq_len = {model.config.max_seq_len}")
    if attention_mask is None:
        attention_mask = torch.ones_like(prompt_ids, dtype=torch.bool)
    if attention_mask.shape != prompt_ids.shape:
        raise ValueError(f"attention_mask must have the prompt's shape {tuple(prompt_ids.shape)}, "
                         f"got {tuple(attention_mask.shape)}")
    if not attention_mask[:, -1].all():
        # New tokens are appended in the last column: a right-padded row would continue from its padding.
        raise ValueError("prompts must be left-padded: every row's last prompt token must be real "
                         "(attention_mask[:, -1] all True)")
    tokens, mask = prompt_ids, attention_mask.bool()
    caches = model.new_caches(batch_size, t_prompt + max_new_tokens) if use_cache else None
    finished = torch.zeros(batch_size, dtype=torch.bool, device=prompt_ids.device)
    step_logits = []
    for step in range(max_new_tokens):
        if use_cache and step > 0:
            logits = model(tokens[:, -1:], mask, caches)[:, -1]       # only the newest token: (B, vocab)
        else:
            logits = model(tokens, mask, caches)[:, -1]               # prefill, or full recomputation
        token = next_token(logits, temperature, top_k, top_p, generator)    # (B,)
        if eos_id is not None:
            token = torch.where(finished, torch.full_like(token, eos_id), token)
            finished = finished | (token == eos_id)
        step_logits.append(logits)
        tokens = torch.cat([tokens, token[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones(batch_size, 1, dtype=torch.bool, device=mask.device)], dim=1)
        if eos_id is not None and finished.any():
            break
    return Generation(tokens, torch.stack(step_logits, dim=1))
