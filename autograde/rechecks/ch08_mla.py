"""Re-checks for chapter 8 (see autograde/rechecks/__init__.py). References, computed by the trusted grader with
torch alone: F.linear and F.rms_norm for the latent projection, RoPE by complex multiplication (as DeepSeek's own
inference code rotates), and multi-head latent attention with every key and value expanded explicitly, then
torch's scaled_dot_product_attention. The student's functions run in the sandbox on fresh float64 inputs."""
import torch
import torch.nn.functional as F

from autograde.rechecks import Probe

D_MODEL, D_C, D_ROPE, D_NOPE, D_V, N_HEADS = 24, 12, 4, 6, 5, 4


def _latent_kv_inputs(g):
    return {"h": torch.randn(2, 5, D_MODEL, generator=g, dtype=torch.float64),
            "w_dkv": torch.randn(D_C + D_ROPE, D_MODEL, generator=g, dtype=torch.float64) * 0.3,
            "w_dkv3": torch.randn(D_C + 3 * D_ROPE, D_MODEL, generator=g, dtype=torch.float64) * 0.3,
            "norm": torch.randn(D_C, generator=g, dtype=torch.float64) + 1}


LATENT_KV_CODE = '''
import torch
from torch import nn
def _linear(weight):
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False).double()
    with torch.no_grad():
        layer.weight.copy_(weight)
    return layer
norm = nn.RMSNorm(12, eps=1e-6).double()
with torch.no_grad():
    norm.weight.copy_(inputs["norm"])
    result = [*latent_kv(inputs["h"], _linear(inputs["w_dkv"]), norm, 12, 4),
              *latent_kv(inputs["h"], _linear(inputs["w_dkv3"]), nn.Identity(), 12, 4)]
'''


def _latent_kv_reference(i):
    out = []
    for weight, norm in ((i["w_dkv"], True), (i["w_dkv3"], False)):
        joint = F.linear(i["h"], weight)
        latent, rope = joint[..., :D_C], joint[..., D_C:]
        if norm:
            latent = F.rms_norm(latent, (D_C,), i["norm"], eps=1e-6)
        out += [latent[:, None], rope.reshape(2, 5, -1, D_ROPE).permute(0, 2, 1, 3)]
    return tuple(out)


def _rope_inputs(g):
    return {"q": torch.randn(2, 3, 5, D_NOPE + 8, generator=g, dtype=torch.float64),
            "k": torch.randn(2, 1, 5, 8, generator=g, dtype=torch.float64),
            "positions": torch.randint(0, 16, (2, 5), generator=g)}   # float32 angles are exact enough below 16


# The values are compared to 1e-6, which a rotation computed in float32 meets; the tests also require float64 in,
# float64 out (assert_close checks the dtype), so the last output says whether every part came back in float64.
ROPE_CODE = '''
import torch
result = [*decoupled_rope(inputs["q"], inputs["k"], inputs["positions"], 6),
          *decoupled_rope(inputs["q"], inputs["k"], inputs["positions"], 6, 100000.0)]
result.append(torch.tensor([float(all(t.dtype == torch.float64 for t in result))]))
'''


def _rotate(x, positions, theta):
    """Pairs (2i, 2i + 1) as complex numbers times e^(i m theta^(-2i/d)): DeepSeek-V3's apply_rotary_emb."""
    d = x.shape[-1]
    freqs = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions[:, None, :, None].double() * freqs                      # (B, 1, T, d/2)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def _rope_reference(i):
    q, k, positions = i["q"], i["k"], i["positions"]
    return (*(t for theta in (10000.0, 100000.0)
              for t in (q[..., :D_NOPE], _rotate(q[..., D_NOPE:], positions, theta), _rotate(k, positions, theta))),
            torch.tensor([1.0]))


def _attention_inputs(g):
    b, t, s = 2, 3, 7
    mask = torch.rand(b, N_HEADS, t, s, generator=g) > 0.3
    mask[..., 0] = True
    mask[1, 2, 0] = False                     # a query with nothing to attend to: a zero output, never NaN
    return {"q_nope": torch.randn(b, N_HEADS, t, D_NOPE, generator=g, dtype=torch.float64),
            "q_rope": torch.randn(b, N_HEADS, t, D_ROPE, generator=g, dtype=torch.float64),
            "c_kv": torch.randn(b, 1, s, D_C, generator=g, dtype=torch.float64),
            "k_rope": torch.randn(b, 1, s, D_ROPE, generator=g, dtype=torch.float64),
            "k_rope2": torch.randn(b, 2, s, D_ROPE, generator=g, dtype=torch.float64),
            "w_ukv": torch.randn(N_HEADS * (D_NOPE + D_V), D_C, generator=g, dtype=torch.float64) * 0.5, "mask": mask}


def _attention_code(function: str) -> str:
    return f'''
args = inputs["q_nope"], inputs["q_rope"], inputs["c_kv"]
result = [{function}(*args, inputs["k_rope"], inputs["w_ukv"], 5, inputs["mask"]),
          {function}(*args, inputs["k_rope2"], inputs["w_ukv"], 5),
          {function}(inputs["q_nope"][:, :, -1:], inputs["q_rope"][:, :, -1:], inputs["c_kv"], inputs["k_rope"],
                     inputs["w_ukv"], 5)]
'''


def _expanded(q_nope, q_rope, c_kv, k_rope, w_ukv, mask=None):
    """Every head's key [W_UK c ; k^R of its group] and value W_UV c, written out, then torch's attention."""
    b, h, _, _ = q_nope.shape
    per_head = w_ukv.reshape(h, D_NOPE + D_V, D_C)
    keys = torch.einsum("bsc,hnc->bhsn", c_kv[:, 0], per_head[:, :D_NOPE])
    values = torch.einsum("bsc,hvc->bhsv", c_kv[:, 0], per_head[:, D_NOPE:])
    group = torch.arange(h) // (h // k_rope.shape[1])
    keys = torch.cat([keys, k_rope[:, group]], dim=-1)
    return F.scaled_dot_product_attention(torch.cat([q_nope, q_rope], dim=-1), keys, values, attn_mask=mask)


def _attention_reference(i):
    args = i["q_nope"], i["q_rope"], i["c_kv"]
    return (_expanded(*args, i["k_rope"], i["w_ukv"], i["mask"]), _expanded(*args, i["k_rope2"], i["w_ukv"]),
            _expanded(i["q_nope"][:, :, -1:], i["q_rope"][:, :, -1:], i["c_kv"], i["k_rope"], i["w_ukv"]))


def _cache_inputs(g):
    return {"c_kv": torch.randn(3, 1, 6, 10, generator=g, dtype=torch.float64),
            "k_rope": torch.randn(3, 2, 6, 4, generator=g, dtype=torch.float64)}


CACHE_CODE = '''
cache = LatentCache(3, 9, 10, 4, n_rope_heads=2, dtype=torch.float64)
first = cache.append(inputs["c_kv"][:, :, :4], inputs["k_rope"][:, :, :4])
c_all, k_all = cache.append(inputs["c_kv"][:, :, 4:], inputs["k_rope"][:, :, 4:])
small = LatentCache(1, 1, 512, 64, dtype=torch.bfloat16)
result = [c_all.clone(), k_all.clone(), first[0].clone(),
          torch.tensor([float(cache.nbytes), float(cache.length), float(small.nbytes)])]
'''

# The cache above holds 6 of 9 positions, a latent of 10 and 2 rotary heads of 4, in float64. Each must raise
# ValueError: a latent of the wrong width, the wrong number of rotary heads, too many tokens, another dtype, another
# batch size, c_kv and k_rope of different lengths.
CACHE_REFUSALS = tuple(f"cache.append(torch.randn{c}, torch.randn{k})" for c, k in (
    ("(3, 1, 1, 11, dtype=torch.float64)", "(3, 2, 1, 4, dtype=torch.float64)"),
    ("(3, 1, 1, 10, dtype=torch.float64)", "(3, 3, 1, 4, dtype=torch.float64)"),
    ("(3, 1, 4, 10, dtype=torch.float64)", "(3, 2, 4, 4, dtype=torch.float64)"),
    ("(3, 1, 1, 10)", "(3, 2, 1, 4)"),
    ("(1, 1, 1, 10, dtype=torch.float64)", "(1, 2, 1, 4, dtype=torch.float64)"),
    ("(3, 1, 1, 10, dtype=torch.float64)", "(3, 2, 2, 4, dtype=torch.float64)")))


def _cache_reference(i):
    sizes = [3 * 9 * (10 + 2 * 4) * 8, 6, 576 * 2]                  # float64: 8 bytes; bfloat16: 2
    return i["c_kv"], i["k_rope"], i["c_kv"][:, :, :4], torch.tensor(sizes, dtype=torch.float64)


NEVER_EXPANDS = '''
from torch.utils._python_dispatch import TorchDispatchMode


class _Largest(TorchDispatchMode):
    largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


wide = (torch.randn(1, 4, 1, 64), torch.randn(1, 4, 1, 4), torch.randn(1, 1, 50, 8), torch.randn(1, 1, 50, 4),
        torch.randn(4 * 128, 8))
with _Largest() as record:
    absorbed_latent_attention(*wide, 64)
result.append(torch.tensor(float(record.largest < 4 * 50 * 64)))     # 1: no tensor as large as per-head keys
'''


def _absorbed_reference(i):
    return (*_attention_reference(i), torch.tensor(1.0))


PROBES = {
    "test_latent_kv": Probe(
        inputs=_latent_kv_inputs, code=LATENT_KV_CODE, reference=_latent_kv_reference,
        # 24 outputs that do not split into kv_lora_rank + a positive multiple of qk_rope_head_dim
        refusals=tuple(f"latent_kv(inputs['h'], _linear(inputs['w_dkv3']), nn.Identity(), {rank}, {rope})"
                       for rank, rope in ((12, 5), (30, 4), (24, 4)))),
    "test_decoupled_rope": Probe(inputs=_rope_inputs, code=ROPE_CODE, reference=_rope_reference, rtol=1e-6, atol=1e-6),
    "test_naive_latent_attention": Probe(
        inputs=_attention_inputs, code=_attention_code("naive_latent_attention"), reference=_attention_reference,
        # a w_ukv of the wrong shape, and 3 rotary key heads for 4 query heads
        refusals=("naive_latent_attention(*args, inputs['k_rope'], inputs['w_ukv'][:-1], 5)",
                  "naive_latent_attention(*args, torch.randn(2, 3, 7, 4, dtype=torch.float64), inputs['w_ukv'], 5)")),
    "test_absorbed_latent_attention": Probe(inputs=_attention_inputs,
                                            code=_attention_code("absorbed_latent_attention") + NEVER_EXPANDS,
                                            reference=_absorbed_reference, rtol=1e-9, atol=1e-10),
    "test_latent_cache": Probe(inputs=_cache_inputs, code=CACHE_CODE, reference=_cache_reference, rtol=0, atol=0,
                               refusals=CACHE_REFUSALS),
}
