"""Re-checks for chapter 5 (see autograde/rechecks/__init__.py). References: masks built from the full square
triangle, torch.cat for the cache, and the course's attnlab for generation, all computed by the trusted grader.
As in the notebook's tests, generate is re-checked on the course's mask and cache, so that a bug there is
charged once."""
import torch

from autograde.rechecks import Probe


def _mask_inputs(g: torch.Generator) -> dict[str, torch.Tensor]:
    t_new, past = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g))
    attention_mask = torch.rand(3, past + t_new, generator=g) > 0.3
    attention_mask[:, -t_new:] = True
    return {"shape": torch.tensor([t_new, past]), "attention_mask": attention_mask}


def _mask_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    t_new, past = (int(x) for x in i["shape"])
    causal = torch.ones(past + t_new, past + t_new, dtype=torch.bool).tril()[past:]
    padded = (causal[None, None] & i["attention_mask"][:, None, None, :]).double()
    # the last three: the padded mask's dtype is bool (1.0) for a bool attention_mask and for a 0/1 integer one, and
    # so is the causal mask's (the tests check it: a float tril is wrong)
    return causal.double(), padded, torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0)


def _cache_inputs(g: torch.Generator) -> dict[str, torch.Tensor]:
    shapes = {"1": 4, "2": 1, "3": 2}                     # a prefill of 4, one decoding step, a chunk of 2
    return {f"{kv}{n}": torch.randn(2, 3, t, 5, generator=g, dtype=torch.float64)
            for n, t in shapes.items() for kv in "kv"}


def _cache_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    out = []
    for n in "123":
        k = torch.cat([i[f"k{m}"] for m in "123"[: int(n)]], dim=2)
        v = torch.cat([i[f"v{m}"] for m in "123"[: int(n)]], dim=2)
        out += [k, v]
    return (*out, torch.tensor(7.0), torch.tensor(1.0), torch.tensor(1.0), i["k3"], i["v3"])


# The course's stand-ins for the student's mask and cache while generate is re-checked.
STAND_INS = '''
class _CourseCache:
    def __init__(self, batch_size, n_heads, max_len, d_head, dtype=torch.float32, device=None):
        self.k = self.v = None
        self.length, self.max_len = 0, max_len
    def append(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.length = self.k.shape[2]
        return self.k, self.v
def _course_mask(t_new, past=0, attention_mask=None, device=None):
    causal = torch.ones(past + t_new, past + t_new, dtype=torch.bool, device=device).tril()[past:]
    return causal if attention_mask is None else causal[None, None] & attention_mask.bool()[:, None, None, :]
'''

# The model is given the stand-ins explicitly (CausalLM's cache_class and mask_function), wherever CausalLM and
# generate are defined.
GENERATE_CODE = "import torch\n" + STAND_INS + '''
seed = int(inputs["seed"])
torch.manual_seed(seed)
model = CausalLM(CausalLMConfig(vocab_size=41, d_model=24, n_heads=3, d_ff=48, n_layers=2, max_seq_len=32),
                 cache_class=_CourseCache, mask_function=_course_mask)
model = model.double().eval()
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.3)
prompt, mask = inputs["prompt"], inputs["attention_mask"]
cached = generate(model, prompt, 9, attention_mask=mask)
full = generate(model, prompt, 9, attention_mask=mask, use_cache=False)
sampled = generate(model, prompt, 9, attention_mask=mask, temperature=1.0, top_p=0.9, eos_id=7,
                   generator=torch.Generator().manual_seed(seed))
result = [cached.tokens.double(), cached.logits, full.tokens.double(), full.logits,
          sampled.tokens.double(), sampled.logits]
'''


def _generate_inputs(g: torch.Generator) -> dict[str, torch.Tensor]:
    lengths = torch.tensor([6, 2, 4])
    prompt = torch.randint(0, 41, (3, 6), generator=g)
    mask = torch.arange(6)[None, :] >= 6 - lengths[:, None]       # left padding
    return {"seed": torch.randint(0, 2**31, (1,), generator=g), "prompt": prompt, "attention_mask": mask}


def _generate_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    from attnlab.models.causal_lm import CausalLM, CausalLMConfig
    from attnlab.decoding.generation import generate
    seed = int(i["seed"])
    torch.manual_seed(seed)
    model = CausalLM(CausalLMConfig(vocab_size=41, d_model=24, n_heads=3, d_ff=48, n_layers=2, max_seq_len=32))
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    cached = generate(model, i["prompt"], 9, attention_mask=i["attention_mask"])
    sampled = generate(model, i["prompt"], 9, attention_mask=i["attention_mask"], temperature=1.0, top_p=0.9,
                       eos_id=7, generator=torch.Generator().manual_seed(seed))
    return (cached.tokens.double(), cached.logits, cached.tokens.double(), cached.logits,
            sampled.tokens.double(), sampled.logits)


PROBES = {
    "test_causal_mask_with_past": Probe(
        inputs=_mask_inputs,
        code="t_new, past = (int(x) for x in inputs['shape'])\n"
             "causal = causal_mask_with_past(t_new, past)\n"
             "padded = decoder_self_attention_mask(t_new, past, inputs['attention_mask'])\n"
             "as_integers = decoder_self_attention_mask(t_new, past, inputs['attention_mask'].long())\n"
             "result = [causal.double(), padded.double(),\n"
             "          torch.tensor(float(padded.dtype == torch.bool)), torch.tensor(float(as_integers.dtype == torch.bool)),\n"
             "          torch.tensor(float(causal.dtype == torch.bool))]",
        reference=_mask_reference, rtol=0, atol=0,
        refusals=("causal_mask_with_past(0, 2)", "causal_mask_with_past(2, -1)")),
    "test_kv_cache": Probe(
        inputs=_cache_inputs,
        code="cache = KVCache(2, 3, 7, 5, dtype=inputs['k1'].dtype)\n"
             "result = []\n"
             "for n in '123':\n"
             "    k_all, v_all = cache.append(inputs[f'k{n}'], inputs[f'v{n}'])\n"
             "    result += [k_all.clone(), v_all.clone()]\n"
             "result += [torch.tensor(float(cache.length)), torch.tensor(float(k_all.data_ptr() == cache.k.data_ptr()))]\n"
             "try:\n"
             "    cache.append(inputs['k2'], inputs['v2'])       # the cache is full: 4 + 1 + 2 = max_len\n"
             "    refused = 0.0\n"
             "except ValueError:\n"
             "    refused = float(cache.length == 7)\n"
             "result += [torch.tensor(refused)]\n"
             "cache.reset()\n"
             "result += [t.clone() for t in cache.append(inputs['k3'], inputs['v3'])]",
        reference=_cache_reference, rtol=0, atol=0),
    "test_generate": Probe(inputs=_generate_inputs, code=GENERATE_CODE, reference=_generate_reference,
                           rtol=1e-9, atol=1e-9,
                           # 6 + 30 tokens past max_seq_len = 32, and an empty prompt
                           refusals=("generate(model, prompt, 30)", "generate(model, prompt[:, :0], 3)")),
}
