"""Re-checks for chapter 7 (see autograde/rechecks/__init__.py). References, computed by the trusted grader:
torch's F.rms_norm, F.scaled_dot_product_attention(enable_gqa=True) and repeat_interleave, the course's attnlab
for the rotation, the layer, the block and the model, and llama.cpp's permutation inverted by hand. As in the
notebook's tests, the attention layer runs on torch stand-ins for RoPE and attention, and the block on torch
stand-ins for its norms, attention and feed-forward, so that a bug in one exercise is charged to its cell only."""
import torch
import torch.nn.functional as F

from autograde.rechecks import Probe
from autograde.rechecks.loading import LOAD, load, random_weights

D_MODEL, N_HEADS, N_KV_HEADS, D_FF, THETA = 32, 4, 2, 48, 100000.0
D_HEAD = D_MODEL // N_HEADS

# Stand-ins the probes give the student's classes: torch and transformers only, never the student's code.
STAND_INS = LOAD + '''
import torch.nn.functional as F
from transformers import LlamaConfig as _HFConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as _Rotary, apply_rotary_pos_emb as _rotate


def _rope(x, positions, theta=10000.0):
    d = x.shape[-1]
    rotary = _Rotary(_HFConfig(hidden_size=2 * d, num_attention_heads=2, head_dim=d, rope_theta=theta))
    cos, sin = rotary(x.float(), positions.expand(x.shape[0], -1))
    out, _ = _rotate(x, x, cos.to(x.dtype), sin.to(x.dtype))
    return out


def _attention(q, k, v, mask=None):
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), None


class _Cache:
    def __init__(self, batch_size, n_heads, max_len, d_head, dtype=torch.float32, device=None):
        self.k = self.v = None
        self.length = 0
    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.length = self.k.shape[2]
        return self.k, self.v
    def attend(self, q, k, v, mask, attention_fn):
        k, v = self.append(k, v)
        return attention_fn(q, k, v, mask)[0]


class _Attention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, theta):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head, self.theta = n_heads, n_kv_heads, d_model // n_heads, theta
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)
    def forward(self, x, mask=None, positions=None, cache=None):
        b, t, _ = x.shape
        q = self.w_q(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)
        k = self.w_k(x).view(b, t, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = self.w_v(x).view(b, t, self.n_kv_heads, self.d_head).transpose(1, 2)
        q, k = _rope(q, positions, self.theta), _rope(k, positions, self.theta)
        if cache is not None:
            k, v = cache.append(k, v)
        z, _ = _attention(q, k, v, mask)
        return self.w_o(z.transpose(1, 2).reshape(b, t, -1))


class _SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)
    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def _mask(t_new, past=0):
    return torch.ones(past + t_new, past + t_new, dtype=torch.bool).tril()[past:]
'''


def _rms_inputs(g):
    return {"x": torch.randn(3, 5, 16, generator=g, dtype=torch.float64) * 3 + 1,
            "weight": torch.randn(16, generator=g, dtype=torch.float64)}


RMS_CODE = '''
result = []
for eps in (1e-5, 1e-2):
    norm = RMSNorm(16, eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(inputs["weight"])
        result.append(norm(inputs["x"]))
half = RMSNorm(16, eps=1e-5).bfloat16()
with torch.no_grad():
    half.weight.copy_(inputs["weight"])
    result.append(half(inputs["x"].bfloat16()))
'''


def _rms_reference(i):
    x16, w16 = i["x"].bfloat16(), i["weight"].bfloat16()
    # bfloat16 as transformers' LlamaRMSNorm computes it: in float32, cast back, then times the weight
    x32 = x16.float()
    half = w16 * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).bfloat16()
    return (*(F.rms_norm(i["x"], (16,), i["weight"], eps) for eps in (1e-5, 1e-2)), half)


def _rope_inputs(g):
    return {"x": torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64),
            "positions": torch.randint(0, 64, (2, 7), generator=g)}


def _rope_reference(i):
    from attnlab.layers.rope import apply_rope
    return (*(apply_rope(i["x"], i["positions"], theta) for theta in (10000.0, 100000.0)),
            apply_rope(i["x"].bfloat16(), i["positions"], 10000.0).double(), torch.tensor(1.0))


def _swiglu_module():
    from attnlab.layers.feedforward import SwiGLU
    return SwiGLU(16, 24)


def _swiglu_inputs(g):
    return {**random_weights(_swiglu_module(), "ffn", g),
            "x": torch.randn(3, 4, 16, generator=g, dtype=torch.float64)}


def _swiglu_reference(i):
    gate, up = F.linear(i["x"], i["ffn.w_gate.weight"]), F.linear(i["x"], i["ffn.w_up.weight"])
    return (F.linear(F.silu(gate) * up, i["ffn.w_down.weight"]),)


def _gqa_inputs(g):
    mask = torch.rand(2, 6, 5, 7, generator=g) > 0.3
    mask[..., 0] = True
    return {"q": torch.randn(2, 6, 5, 8, generator=g, dtype=torch.float64),
            "k": torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64),
            "v": torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64), "mask": mask}


# The notebook's test refuses an attention that copies K or V once per query head (repeat_kv, repeat_interleave,
# expand then reshape): the right numbers, at n_heads / n_kv_heads times the memory. So does the re-check, the way
# the test looks: a tensor returned by a torch function, of k's last two sizes, with storage of 3 k's or more.
GQA_CODE = '''
import torch
z, weights = grouped_query_attention(inputs["q"], inputs["k"], inputs["v"], inputs["mask"])
z_all, weights_all = grouped_query_attention(inputs["q"], inputs["k"], inputs["v"])
result = [z, weights, z_all, weights_all, repeat_kv(inputs["k"], 3)]


class _NewTensors(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.made.append((tuple(out.shape), out.untyped_storage().nbytes()))
        return out


with _NewTensors() as seen:
    grouped_query_attention(inputs["q"], inputs["k"], inputs["v"])
k = inputs["k"]
copies = [shape for shape, nbytes in seen.made if shape[-2:] == tuple(k.shape[-2:]) and nbytes >= 3 * k.nbytes]
result.append(torch.tensor([float(not copies)]))                  # 1: K and V never copied per query head
'''


def _gqa_reference(i):
    q, k, v, mask = i["q"], i["k"], i["v"], i["mask"]
    k6, v6 = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
    scores = q @ k6.transpose(-1, -2) / D_HEAD ** 0.5
    out = []
    for m in (mask, None):
        weights = torch.softmax(scores if m is None else scores.masked_fill(~m, float("-inf")), dim=-1)
        out += [F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True), weights]
    return (*out, k6, torch.tensor([1.0]))


def _layer_module():
    from attnlab.layers.grouped_attention import GroupedQueryAttention
    return GroupedQueryAttention(D_MODEL, N_HEADS, N_KV_HEADS, THETA)


def _layer_inputs(g):
    return {**random_weights(_layer_module(), "attn", g),
            "x": torch.randn(2, 6, D_MODEL, generator=g, dtype=torch.float64)}


LAYER_CODE = STAND_INS + '''
attn = _load(GroupedQueryAttention(32, 4, 2, 100000.0, rope_fn=_rope, attention_fn=_attention), "attn")
x, cache = inputs["x"], _Cache(2, 2, 6, 8)
with torch.no_grad():
    full = attn(x, _mask(6), torch.arange(6)[None, :])
    steps = [attn(x[:, :4], _mask(4), torch.arange(4)[None, :], cache),
             attn(x[:, 4:], _mask(2, 4), torch.arange(4, 6)[None, :], cache)]
result = [full, torch.cat(steps, dim=1), torch.tensor(float(cache.length))]
'''


def _layer_reference(i):
    attn = load(_layer_module(), i, "attn")
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    with torch.no_grad():
        full = attn(i["x"], mask, torch.arange(6)[None, :])
    return full, full, torch.tensor(6.0)


def _config():
    from attnlab.models.llama import LlamaConfig
    return LlamaConfig(vocab_size=40, d_model=D_MODEL, n_heads=N_HEADS, n_kv_heads=N_KV_HEADS, d_ff=D_FF,
                       n_layers=2, max_seq_len=32, rope_theta=THETA)


def _block_inputs(g):
    from attnlab.models.llama import LlamaBlock
    return {**random_weights(LlamaBlock(_config()), "block", g),
            "x": torch.randn(2, 5, D_MODEL, generator=g, dtype=torch.float64)}


BLOCK_CODE = STAND_INS + '''
block = LlamaBlock(LlamaConfig(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48, n_layers=2,
                               max_seq_len=32, rope_theta=100000.0))
block.norm1, block.norm2 = nn.RMSNorm(32, eps=1e-5), nn.RMSNorm(32, eps=1e-5)
block.attn, block.feed_forward = _Attention(32, 4, 2, 100000.0), _SwiGLU(32, 48)
block = _load(block, "block")
with torch.no_grad():
    result = [block(inputs["x"], _mask(5), torch.arange(5)[None, :])]
'''


def _block_reference(i):
    from attnlab.models.llama import LlamaBlock
    block = load(LlamaBlock(_config()), i, "block")
    with torch.no_grad():
        return (block(i["x"], torch.ones(5, 5, dtype=torch.bool).tril(), torch.arange(5)[None, :]),)


LLAMA_CODE = STAND_INS + '''
class _Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(config.d_model, eps=config.eps), nn.RMSNorm(config.d_model, eps=config.eps)
        self.attn = _Attention(config.d_model, config.n_heads, config.n_kv_heads, config.rope_theta)
        self.feed_forward = _SwiGLU(config.d_model, config.d_ff)
    def forward(self, x, mask=None, positions=None, cache=None):
        x = x + self.attn(self.norm1(x), mask, positions, cache)
        return x + self.feed_forward(self.norm2(x))

config = LlamaConfig(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=int(inputs["n_kv_heads"]), d_ff=48,
                     n_layers=3, max_seq_len=32, rope_theta=100000.0)
model = Llama(config, block_class=_Block)
model.final_norm = nn.RMSNorm(32, eps=config.eps)            # torch's: only new_caches is re-checked here
model = model.double().eval()
torch.manual_seed(int(inputs["seed"]))
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.3)
caches = model.new_caches(2, 10)
stats = [len(caches), caches[0].nbytes, *caches[0].k.shape, caches[0].length, model.new_caches(1)[0].max_len]
prompt = inputs["prompt"]
cached = generate(model, prompt, 6)
full = generate(model, prompt, 6, use_cache=False)
result = [torch.tensor(stats, dtype=torch.float64), torch.tensor(float(torch.equal(cached.tokens, full.tokens)))]
'''


def _llama_inputs(g):
    return {"n_kv_heads": torch.tensor([1, 2][int(torch.randint(0, 2, (1,), generator=g))]),
            "seed": torch.randint(0, 2**31, (1,), generator=g), "prompt": torch.randint(0, 40, (2, 5), generator=g)}


def _llama_reference(i):
    n_kv = int(i["n_kv_heads"])
    stats = [3, 2 * 2 * n_kv * 10 * D_HEAD * 8, 2, n_kv, 10, D_HEAD, 0, 32]     # float64 caches: 8 bytes a number
    return torch.tensor(stats, dtype=torch.float64), torch.tensor(1.0)


def _unpermute_inputs(g):
    return {"k": torch.randn(3 * 64, 16, generator=g, dtype=torch.float64),
            "q": torch.randn(9 * 8, 5, generator=g, dtype=torch.float64)}



def _unpermute_reference(i):
    def original(stored, n_heads):
        # stored row 2j + p of a head holds its original row p * d/2 + j
        rows, d_in = stored.shape
        d = rows // n_heads
        out = torch.empty_like(stored)
        for h in range(n_heads):
            for j in range(d // 2):
                for p in range(2):
                    out[h * d + p * d // 2 + j] = stored[h * d + 2 * j + p]
        return out
    return original(i["k"], 3), original(i["q"], 9)


PROBES = {
    "test_rms_norm": Probe(inputs=_rms_inputs, code=RMS_CODE, reference=_rms_reference,
                           refusals=("RMSNorm(4)(torch.randn(2, 5))",)),
    "test_rope": Probe(inputs=_rope_inputs,
                       code="import torch\nresult = [apply_rope(inputs['x'], inputs['positions'], theta) "
                            "for theta in (10000.0, 100000.0)]\n"
                            "half = apply_rope(inputs['x'].bfloat16(), inputs['positions'], 10000.0)\n"
                            "result += [half.double(), torch.tensor(float(half.dtype == torch.bfloat16))]",
                       reference=_rope_reference, rtol=1e-6, atol=1e-6,
                       # bfloat16 in, bfloat16 out, rotated in float32: within one bfloat16 rounding of the reference
                       per_output={2: (1.6e-2, 1e-5)},
                       refusals=("apply_rope(torch.randn(1, 1, 2, 7), torch.arange(2)[None, :])",)),
    "test_swiglu": Probe(inputs=_swiglu_inputs, code=LOAD + "result = [_load(SwiGLU(16, 24), 'ffn')(inputs['x'])]",
                         reference=_swiglu_reference),
    "test_grouped_query_attention": Probe(
        inputs=_gqa_inputs, code=GQA_CODE, reference=_gqa_reference,
        # 6 query heads over 4 KV heads: not whole groups
        refusals=("grouped_query_attention(*(torch.randn(1, h, 2, 4) for h in (6, 4, 4)))",)),
    "test_gqa_layer": Probe(inputs=_layer_inputs, code=LAYER_CODE, reference=_layer_reference, rtol=1e-6, atol=1e-6),
    "test_llama_block": Probe(inputs=_block_inputs, code=BLOCK_CODE, reference=_block_reference,
                              rtol=1e-6, atol=1e-6),
    "test_llama": Probe(inputs=_llama_inputs, code=LLAMA_CODE, reference=_llama_reference, rtol=0, atol=0,
                        refusals=("model.new_caches(1, config.max_seq_len + 1)",)),
    "test_unpermute_qk": Probe(inputs=_unpermute_inputs, code="result = [unpermute_qk(inputs['k'], 3), "
                                                              "unpermute_qk(inputs['q'], 9)]",
                               reference=_unpermute_reference, rtol=0, atol=0,
                               # rows that are not whole heads, and heads of an odd size
                               refusals=("unpermute_qk(torch.zeros(10, 4), 3)", "unpermute_qk(torch.zeros(6, 4), 2)")),
}
