"""Chapter 1: attnlab's scaled dot-product attention vs torch's fused kernel, on the CPU."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.layers.attention import scaled_dot_product_attention
from bench.timing import medians


def run() -> list[str]:
    torch.manual_seed(0)
    shape = (8, 8, 512, 64)                         # (B, H, T, D)
    q, k, v = (torch.randn(shape) for _ in range(3))
    with torch.inference_mode():
        t = medians({"attnlab": lambda: scaled_dot_product_attention(q, k, v),
                     "torch": lambda: F.scaled_dot_product_attention(q, k, v)}, repeats=15)
    return [f"sdpa (B, H, T, D) = {shape} float32, {torch.get_num_threads()} threads: "
            f"attnlab {t['attnlab'] * 1e3:.1f} ms, F.scaled_dot_product_attention {t['torch'] * 1e3:.1f} ms, "
            f"ratio attnlab/torch = {t['attnlab'] / t['torch']:.2f}x (median of 15)"]
