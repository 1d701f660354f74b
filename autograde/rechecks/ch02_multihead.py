"""Re-checks for chapter 2 (see autograde/rechecks/__init__.py). References: view/transpose for the heads,
torch.tril and arange for the masks, and the course's MultiHeadAttention loaded with the same random weights
(itself checked against nn.MultiheadAttention by the course's tests). As in the notebook, the student's
multi-head attention runs on their own split_heads and merge_heads."""
import torch

from autograde.rechecks import Probe
from autograde.rechecks.loading import LOAD, load, random_weights

D_MODEL, N_HEADS = 24, 3


def _heads_inputs(g):
    return {"x": torch.randn(3, 5, D_MODEL, generator=g, dtype=torch.float64)}


def _heads_reference(i):
    b, t, d = i["x"].shape
    split = i["x"].view(b, t, N_HEADS, d // N_HEADS).transpose(1, 2)
    return split, i["x"]


def _mask_inputs(g):
    return {"lengths": torch.randint(0, 8, (4,), generator=g), "t": torch.randint(1, 9, (1,), generator=g)}


def _mask_reference(i):
    t = int(i["t"])
    return (torch.ones(t, t, dtype=torch.bool).tril().double(),
            (torch.arange(7)[None, :] < i["lengths"][:, None])[:, None, None, :].double(), torch.tensor([1.0, 1.0]))


def _mha_module():
    from attnlab.layers.multihead import MultiHeadAttention
    return MultiHeadAttention(D_MODEL, N_HEADS)


def _mha_inputs(g):
    inputs = random_weights(_mha_module(), "mha", g)
    inputs["x"] = torch.randn(3, 6, D_MODEL, generator=g, dtype=torch.float64)
    inputs["x_kv"] = torch.randn(3, 9, D_MODEL, generator=g, dtype=torch.float64)
    lengths = torch.tensor([9, 1, 5])
    inputs["pad"] = (torch.arange(9)[None, :] < lengths[:, None])[:, None, None, :]
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    inputs["self_mask"] = causal & (torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None])[:, None, None, :]
    return inputs


def _mha_reference(i, cross: bool):
    mha = load(_mha_module(), i, "mha")
    with torch.no_grad():
        if cross:
            return (*mha(i["x"], i["x_kv"], mask=i["pad"]), mha(i["x"], mask=i["self_mask"])[0])
        return mha(i["x"])


MHA_SELF = LOAD + '''
mha = _load(MultiHeadAttention(24, 3), "mha")
with torch.no_grad():
    result = list(mha(inputs["x"]))
'''

MHA_CROSS = LOAD + '''
mha = _load(MultiHeadAttention(24, 3), "mha")
with torch.no_grad():
    result = [*mha(inputs["x"], inputs["x_kv"], mask=inputs["pad"]), mha(inputs["x"], mask=inputs["self_mask"])[0]]
'''

PROBES = {
    "test_split_merge_heads": Probe(
        inputs=_heads_inputs,
        code="s = split_heads(inputs['x'], 3)\nresult = [s, merge_heads(s)]",
        reference=_heads_reference, rtol=0, atol=0),
    "test_masks": Probe(
        inputs=_mask_inputs,
        # the values as 0/1, then whether each mask is torch.bool (the tests check the dtype: a float tril is wrong)
        code="import torch\n"
             "c, p = causal_mask(int(inputs['t'])), padding_mask(inputs['lengths'], max_len=7)\n"
             "result = [c.double(), p.double(), torch.tensor([float(c.dtype == torch.bool), float(p.dtype == torch.bool)])]",
        reference=_mask_reference, rtol=0, atol=0,
        refusals=("padding_mask(torch.tensor([8]), max_len=7)", "padding_mask(torch.tensor([-1]), max_len=7)")),
    "test_mha_self": Probe(inputs=_mha_inputs, code=MHA_SELF, reference=lambda i: _mha_reference(i, cross=False)),
    "test_mha_cross_and_masks": Probe(
        inputs=_mha_inputs, code=MHA_CROSS, reference=lambda i: _mha_reference(i, cross=True),
        # d_model not divisible by n_heads, an input of the wrong width, batches that do not match
        refusals=("MultiHeadAttention(10, 3)", "mha(torch.randn(2, 3, 23, dtype=torch.float64))",
                  "mha(torch.randn(2, 3, 24, dtype=torch.float64), torch.randn(3, 4, 24, dtype=torch.float64))")),
}
