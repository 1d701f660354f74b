"""Re-checks for chapter 3 (see autograde/rechecks/__init__.py). References: F.layer_norm, the post- and
pre-norm formulas around torch's LayerNorm, F.linear with relu or exact gelu, and the course's EncoderLayer
loaded with the same random weights. As in the notebook, Add & Norm and the encoder layer run on torch's
LayerNorm, so a layer_norm bug is charged to its own cell only."""
import math

import torch
import torch.nn.functional as F

from autograde.rechecks import Probe
from autograde.rechecks.loading import LOAD, load, random_weights

D_MODEL, N_HEADS, D_FF = 16, 4, 40


def _norm_inputs(g):
    return {"x": torch.randn(3, 5, D_MODEL, generator=g, dtype=torch.float64) * 3 + 1,
            "weight": torch.randn(D_MODEL, generator=g, dtype=torch.float64),
            "bias": torch.randn(D_MODEL, generator=g, dtype=torch.float64)}


def _norm_reference(i):
    return (*(F.layer_norm(i["x"], (D_MODEL,), i["weight"], i["bias"], eps) for eps in (1e-5, 1.0)),
            F.layer_norm(i["x"][0], (D_MODEL,), i["weight"], i["bias"], 1e-5), torch.tensor([1.0]))


def _sublayer_inputs(g):
    inputs = _norm_inputs(g)
    inputs["w_f"] = torch.randn(D_MODEL, D_MODEL, generator=g, dtype=torch.float64) * 0.3
    return inputs


def _add_norm_reference(i):
    def norm(h):
        return F.layer_norm(h, (D_MODEL,), i["weight"], i["bias"], 1e-6)

    def f(h):
        return torch.tanh(h @ i["w_f"])
    x = i["x"]
    return norm(x + f(x)), x + f(norm(x))


TORCH_NORM = '''
def _torch_norm(d_model, eps):
    norm = nn.LayerNorm(d_model, eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(inputs["weight"]); norm.bias.copy_(inputs["bias"])
    return norm
'''

ADD_NORM = LOAD + TORCH_NORM + '''
result = []
for norm_first in (False, True):
    add_norm = AddNorm(16, norm_first=norm_first, eps=1e-6).double()
    add_norm.norm = _torch_norm(16, 1e-6)
    with torch.no_grad():
        result.append(add_norm(inputs["x"], lambda h: torch.tanh(h @ inputs["w_f"])))
'''


def _ffn_module(activation):
    from attnlab.layers.feedforward import FeedForward
    return FeedForward(D_MODEL, D_FF, activation=activation)


def _ffn_inputs(g):
    inputs = {**random_weights(_ffn_module("relu"), "relu", g), **random_weights(_ffn_module("gelu"), "gelu", g)}
    inputs["x"] = torch.randn(3, 5, D_MODEL, generator=g, dtype=torch.float64) * 3
    return inputs


def _ffn_reference(i):
    out = []
    for name, act in (("relu", F.relu), ("gelu", lambda h: 0.5 * h * (1 + torch.erf(h / math.sqrt(2))))):
        h = F.linear(i["x"], i[f"{name}.linear1.weight"], i[f"{name}.linear1.bias"])
        out.append(F.linear(act(h), i[f"{name}.linear2.weight"], i[f"{name}.linear2.bias"]))
    return tuple(out)


FFN = LOAD + '''
with torch.no_grad():
    result = [_load(FeedForward(16, 40, activation=act), act)(inputs["x"]) for act in ("relu", "gelu")]
'''


def _layer_module(norm_first):
    from attnlab.layers.encoder_layer import EncoderLayer
    return EncoderLayer(D_MODEL, N_HEADS, D_FF, activation="gelu", norm_first=norm_first, eps=1e-6)


def _layer_inputs(g):
    inputs = {**random_weights(_layer_module(False), "post", g), **random_weights(_layer_module(True), "pre", g)}
    inputs["x"] = torch.randn(3, 7, D_MODEL, generator=g, dtype=torch.float64)
    inputs["mask"] = (torch.arange(7)[None, :] < torch.tensor([7, 2, 5])[:, None])[:, None, None, :]
    return inputs


def _layer_reference(i):
    out = []
    for name, norm_first in (("post", False), ("pre", True)):
        layer = load(_layer_module(norm_first), i, name)
        with torch.no_grad():
            out.append(layer(i["x"], mask=i["mask"]))
    return tuple(out)


LAYER = LOAD + '''
result = []
for name, norm_first in (("post", False), ("pre", True)):
    layer = EncoderLayer(16, 4, 40, activation="gelu", norm_first=norm_first, eps=1e-6)
    for add_norm in (layer.add_norm1, layer.add_norm2):      # torch's LayerNorm, as the notebook's test does
        add_norm.norm = nn.LayerNorm(16, eps=1e-6)
    layer = _load(layer, name)
    with torch.no_grad():
        result.append(layer(inputs["x"], mask=inputs["mask"]))
'''

PROBES = {
    "test_layer_norm": Probe(
        inputs=_norm_inputs,
        # then a 2-D float32 call, as the tests make: its values (to float32's precision), and a float32 result
        code="import torch\n"
             "result = [layer_norm(inputs['x'], inputs['weight'], inputs['bias'], eps) for eps in (1e-5, 1.0)]\n"
             "y32 = layer_norm(inputs['x'][0].float(), inputs['weight'].float(), inputs['bias'].float(), 1e-5)\n"
             "result += [y32, torch.tensor([float(y32.dtype == torch.float32)])]",
        reference=_norm_reference, per_output={2: (1e-5, 1e-5)},
        refusals=("layer_norm(torch.randn(2, 5, dtype=torch.float64), torch.ones(4, dtype=torch.float64), "
                  "torch.zeros(4, dtype=torch.float64))",)),
    "test_add_norm": Probe(inputs=_sublayer_inputs, code=ADD_NORM, reference=_add_norm_reference),
    "test_feed_forward": Probe(inputs=_ffn_inputs, code=FFN, reference=_ffn_reference,
                               refusals=("FeedForward(4, 8, activation='swish')",)),
    "test_encoder_layer": Probe(inputs=_layer_inputs, code=LAYER, reference=_layer_reference),
}
