"""Re-checks for chapter 6 (see autograde/rechecks/__init__.py). References: the course's attnlab, computed by
the trusted grader. As in the notebook's tests, each exercise is re-checked with torch's modules standing in
for the chapter's earlier exercises, so that a bug is charged once."""
import torch
from torch import nn

from autograde.rechecks import Probe


def _state(prefix: str, module: nn.Module) -> dict[str, torch.Tensor]:
    return {f"{prefix}.{k}": v.detach().clone() for k, v in module.state_dict().items()}


LOAD = "def _load(module, prefix):\n" \
       "    module.load_state_dict({k[len(prefix) + 1:]: v for k, v in inputs.items() if k.startswith(prefix + '.')})\n" \
       "    return module.double().eval()\n"


def _cross_inputs(g: torch.Generator) -> dict[str, torch.Tensor]:
    from attnlab.layers.multihead import MultiHeadAttention
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
    inputs = _state("attn", MultiHeadAttention(24, 3).double())
    inputs["x"] = torch.randn(3, 5, 24, generator=g, dtype=torch.float64)
    inputs["memory"] = torch.randn(3, 7, 24, generator=g, dtype=torch.float64)
    inputs["source_mask"] = torch.arange(7)[None, :] < torch.tensor([7, 3, 1])[:, None]
    return inputs


def _cross_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    from attnlab.layers.decoder_layer import cross_attention
    from attnlab.layers.multihead import MultiHeadAttention
    attn = MultiHeadAttention(24, 3).double().eval()
    attn.load_state_dict({k[5:]: v for k, v in i.items() if k.startswith("attn.")})
    with torch.no_grad():
        return tuple(cross_attention(attn, i["x"], i["memory"], i["source_mask"]))


def _layer_inputs(g: torch.Generator) -> dict[str, torch.Tensor]:
    from attnlab.layers.decoder_layer import DecoderLayer
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
    norm_first = bool(torch.rand(1, generator=g) < 0.5)
    inputs = _state("layer", DecoderLayer(24, 3, 40, "gelu", norm_first=norm_first))
    inputs["norm_first"] = torch.tensor(int(norm_first))
    inputs["x"] = torch.randn(3, 5, 24, generator=g, dtype=torch.float64)
    inputs["memory"] = torch.randn(3, 7, 24, generator=g, dtype=torch.float64)
    target_mask = torch.arange(5)[None, :] < torch.tensor([5, 3, 5])[:, None]
    inputs["self_mask"] = torch.ones(5, 5, dtype=torch.bool).tril()[None, None] & target_mask[:, None, None, :]
    inputs["source_mask"] = torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None]
    return inputs


def _layer_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    from attnlab.layers.decoder_layer import DecoderLayer
    layer = DecoderLayer(24, 3, 40, "gelu", norm_first=bool(i["norm_first"])).double().eval()
    layer.load_state_dict({k[6:]: v for k, v in i.items() if k.startswith("layer.")})
    with torch.no_grad():
        return (layer(i["x"], i["memory"], i["self_mask"], i["source_mask"]),)


# The stand-ins are passed explicitly (DecoderLayer's cross_attention_fn, Transformer's decoder_layer), wherever
# those classes are defined. course_cross_attention is the notebook's given stand-in (a read-only cell).
LAYER_CODE = LOAD + '''
layer = _load(DecoderLayer(24, 3, 40, "gelu", norm_first=bool(inputs["norm_first"]),
                           cross_attention_fn=course_cross_attention), "layer")
with torch.no_grad():
    result = [layer(inputs["x"], inputs["memory"], inputs["self_mask"], inputs["source_mask"])]
'''

# decode and greedy_translate are re-checked on a Transformer whose decoder layers are torch's. The notebook's
# stand-in (CourseDecoderLayer) lives in a cell the student could have changed, so the grader's copy is here.
COURSE_LAYER = '''
class _GraderDecoderLayer(nn.TransformerDecoderLayer):
    def __init__(self, d_model, n_heads, d_ff, activation="relu", norm_first=False, eps=1e-5):
        super().__init__(d_model, n_heads, d_ff, dropout=0.0, activation=activation, batch_first=True,
                         norm_first=norm_first, layer_norm_eps=eps)
    def forward(self, x, memory, self_mask=None, source_mask=None):
        b, t = x.shape[0], x.shape[1]
        tgt_mask = None
        if self_mask is not None:
            tgt_mask = ~self_mask if self_mask.dim() == 2 else \\
                ~self_mask.expand(b, self.self_attn.num_heads, t, t).reshape(b * self.self_attn.num_heads, t, t)
        return super().forward(x, memory, tgt_mask=tgt_mask,
                               memory_key_padding_mask=None if source_mask is None else ~source_mask.bool())


def _grader_decode(model, target_ids, memory, source_mask=None, target_mask=None):
    t = target_ids.shape[1]
    x = model.target_embeddings(target_ids)
    for layer in model.decoder_layers:
        x = nn.TransformerDecoderLayer.forward(
            layer, x, memory, tgt_mask=torch.ones(t, t, dtype=torch.bool).triu(1),
            tgt_key_padding_mask=None if target_mask is None else ~target_mask.bool(),
            memory_key_padding_mask=None if source_mask is None else ~source_mask.bool())
    x = x if model.final_norm is None else model.final_norm(x)
    return model.lm_head(x)


def _grader_eos(model, source, source_mask):
    """An eos that row 0 reaches by its second step: the grader's own argmax loop, with no eos, shows which token
    that is. Decoding with it, row 0 ends early, so a loop that does not stop when every row has ended, or lets an
    ended row go on, is seen (with an eos no row reaches, it was not)."""
    with torch.no_grad():
        memory = model.encode(source, source_mask)
        target = torch.ones(source.shape[0], 1, dtype=torch.long)
        for _ in range(2):
            target = torch.cat([target, model.decode(target, memory, source_mask)[:, -1].argmax(-1, keepdim=True)], 1)
    return int(target[0, 2])
'''

CONFIG = ("TransformerConfig(source_vocab_size=30, target_vocab_size=25, d_model=24, n_heads=3, d_ff=40, "
          "n_encoder_layers=2, n_decoder_layers=2, max_seq_len=16, norm_first=bool(inputs['norm_first']), "
          "activation='gelu')")

BUILD = COURSE_LAYER + f'''
def _course_model(inputs):
    torch.manual_seed(int(inputs["seed"]))
    return Transformer({CONFIG}, decoder_layer=_GraderDecoderLayer).double().eval()
'''

DECODE_CODE = "import torch\nfrom torch import nn\n" + BUILD + '''
model = _course_model(inputs)
with torch.no_grad():
    # Real target positions only: with right padding the causal mask already hides the padding from them.
    logits = model(inputs["source"], inputs["target"], inputs["source_mask"], inputs["target_mask"])
    result = [logits[inputs["target_mask"]]]
'''

GREEDY_CODE = "import torch\nfrom types import MethodType\nfrom torch import nn\n" + BUILD + '''
model = _course_model(inputs)
with torch.no_grad():
    model.lm_head.weight.mul_(20.0)
model.decode = MethodType(_grader_decode, model)
eos = _grader_eos(model, inputs["source"], inputs["source_mask"])
calls = []
_encode = model.encode
model.encode = lambda *args, **kwargs: calls.append(1) or _encode(*args, **kwargs)
result = [greedy_translate(model, inputs["source"], inputs["source_mask"], max_len=8, eos_id=5).double(),
          # rows that end at different steps, and row 0 alone, which must stop by its second token
          greedy_translate(model, inputs["source"], inputs["source_mask"], max_len=8, eos_id=eos).double(),
          greedy_translate(model, inputs["source"][:1], inputs["source_mask"][:1], max_len=8, eos_id=eos).double()]
result.append(torch.tensor(float(len(calls))))                 # the source is encoded once a call
'''


def _model_inputs(g: torch.Generator) -> dict[str, torch.Tensor]:
    return {"seed": torch.randint(0, 2**31, (1,), generator=g),
            "norm_first": torch.randint(0, 2, (1,), generator=g),
            "source": torch.randint(4, 30, (3, 7), generator=g), "target": torch.randint(4, 25, (3, 6), generator=g),
            "source_mask": torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None],
            "target_mask": torch.arange(6)[None, :] < torch.tensor([6, 3, 5])[:, None]}


def _grader_model(i: dict[str, torch.Tensor]):
    """The trusted twin of the sandbox's _course_model: the same classes and seed give the same weights."""
    import attnlab.models.encoder_decoder as transformer
    scope = {"torch": torch, "nn": nn}
    exec(BUILD, scope)
    torch.manual_seed(int(i["seed"]))
    config = eval(CONFIG, {"inputs": i, "TransformerConfig": transformer.TransformerConfig})
    model = transformer.Transformer(config, decoder_layer=scope["_GraderDecoderLayer"]).double().eval()
    return model, scope


def _decode_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    model, _ = _grader_model(i)
    with torch.no_grad():
        return (model(i["source"], i["target"], i["source_mask"], i["target_mask"])[i["target_mask"]],)


def _greedy_reference(i: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    from types import MethodType

    from attnlab.decoding.beam_search import greedy_translate
    model, scope = _grader_model(i)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    model.decode = MethodType(scope["_grader_decode"], model)
    eos = scope["_grader_eos"](model, i["source"], i["source_mask"])
    return (greedy_translate(model, i["source"], i["source_mask"], max_len=8, eos_id=5).double(),
            greedy_translate(model, i["source"], i["source_mask"], max_len=8, eos_id=eos).double(),
            greedy_translate(model, i["source"][:1], i["source_mask"][:1], max_len=8, eos_id=eos).double(),
            torch.tensor(3.0))


PROBES = {
    "test_cross_attention": Probe(
        inputs=_cross_inputs,
        code="import torch\n" + LOAD + "attn = _load(MultiHeadAttention(24, 3), 'attn')\n"
             "with torch.no_grad():\n"
             "    result = list(cross_attention(attn, inputs['x'], inputs['memory'], inputs['source_mask']))",
        reference=_cross_reference,
        refusals=("cross_attention(attn, inputs['x'], inputs['memory'], inputs['source_mask'][:, :3])",)),
    "test_decoder_layer": Probe(inputs=_layer_inputs, code="import torch\n" + LAYER_CODE, reference=_layer_reference,
                                rtol=1e-9, atol=1e-9),
    "test_transformer": Probe(inputs=_model_inputs, code=DECODE_CODE, reference=_decode_reference,
                              rtol=1e-9, atol=1e-9),
    "test_greedy_translate": Probe(inputs=_model_inputs, code=GREEDY_CODE, reference=_greedy_reference,
                                   rtol=0, atol=0),
}
