"""Chapters 2-4: attnlab's MultiHeadAttention vs nn.MultiheadAttention, and attnlab's encoder vs
transformers' BertModel on the same all-MiniLM-L6-v2 weights (batch 32, 128 tokens)."""
from __future__ import annotations

import torch
from torch import nn

from attnlab.weights.minilm import load_minilm, minilm_path
from attnlab.layers.multihead import MultiHeadAttention
from bench.timing import medians


def _mha() -> str:
    torch.manual_seed(0)
    d_model, n_heads, b, t = 512, 8, 8, 256
    mine = MultiHeadAttention(d_model, n_heads).eval()
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).eval()
    x = torch.randn(b, t, d_model)
    with torch.inference_mode():
        m = medians({"attnlab": lambda: mine(x), "torch": lambda: ref(x, x, x, need_weights=False)}, repeats=15)
    return (f"MultiHeadAttention (B, T, d_model, h) = ({b}, {t}, {d_model}, {n_heads}): attnlab {m['attnlab'] * 1e3:.1f} ms, "
            f"nn.MultiheadAttention {m['torch'] * 1e3:.1f} ms, ratio attnlab/torch = {m['attnlab'] / m['torch']:.2f}x")


def _encoder() -> str:
    import transformers
    from transformers import BertModel
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    mine = load_minilm()
    bert = BertModel.from_pretrained(str(minilm_path())).eval()
    torch.manual_seed(0)
    b, t = 32, 128
    ids = torch.randint(1000, 30000, (b, t))
    mask = torch.arange(t)[None, :] < torch.randint(t // 2, t + 1, (b,))[:, None]
    with torch.inference_mode():
        diff = (mine(ids, attention_mask=mask) - bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state)[mask]
        m = medians({"attnlab": lambda: mine(ids, attention_mask=mask),
                     "transformers": lambda: bert(input_ids=ids, attention_mask=mask.long())}, repeats=7, warmup=1)
    return (f"MiniLM encoder (B, T) = ({b}, {t}): attnlab {m['attnlab'] * 1e3:.0f} ms, BertModel {m['transformers'] * 1e3:.0f} ms, "
            f"ratio attnlab/transformers = {m['attnlab'] / m['transformers']:.2f}x (max |diff| on real tokens "
            f"{diff.abs().max().item():.1e})")


def run() -> list[str]:
    return [_mha(), _encoder()]
