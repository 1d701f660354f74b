"""Re-checks for chapter 4 (see autograde/rechecks/__init__.py). References: the sinusoidal formula, the
course's Embeddings and Encoder loaded with the same random weights (checked against nn.TransformerEncoder and
transformers' BertModel by the course's tests), and a masked mean. As in the notebook, the embeddings probe
avoids sinusoidal positions (a positions bug is charged to its own cell), and the encoder probe uses plain
token embeddings (an embeddings bug is charged to its own cell). The capstone's probe runs what the capstone
runs on MiniLM, a BERT-style encoder and mean pooling, on random weights: loading the real model in every
re-check would cost seconds for nothing the other probes do not already test."""
import torch

from autograde.rechecks import Probe
from autograde.rechecks.loading import LOAD, load, random_weights

BERT = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_seq_len=12, positions="learned",
            type_vocab_size=2, embedding_norm=True, scale_embeddings=False, activation="gelu", eps=1e-12)
SCALED = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=1, max_seq_len=12, positions="none",
              scale_embeddings=True)
PLAIN = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_seq_len=12, positions="none",
             scale_embeddings=False, activation="gelu")


def _config(**kwargs):
    from attnlab.layers.embeddings import EncoderConfig
    return EncoderConfig(**kwargs)


def _pe_inputs(g):
    return {"shape": torch.tensor([int(torch.randint(1, 40, (1,), generator=g)), 2 * int(torch.randint(1, 20, (1,), generator=g))])}


def _pe_reference(i):
    max_len, d = (int(v) for v in i["shape"])
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    k = torch.arange(d, dtype=torch.float64)[None, :]
    angle = position / 10000.0 ** ((k - k % 2) / d)
    return (torch.where(k % 2 == 0, torch.sin(angle), torch.cos(angle)),)


def _ids(g, types: bool):
    ids = torch.randint(0, 40, (3, 9), generator=g)
    out = {"ids": ids, "mask": torch.arange(9)[None, :] < torch.tensor([9, 4, 1])[:, None]}
    if types:
        out["types"] = torch.randint(0, 2, (3, 9), generator=g)
    return out


def _embeddings_inputs(g):
    from attnlab.layers.embeddings import Embeddings
    return {**random_weights(Embeddings(_config(**BERT)), "bert", g),
            **random_weights(Embeddings(_config(**SCALED)), "scaled", g), **_ids(g, types=True)}


def _embeddings_reference(i):
    from attnlab.layers.embeddings import Embeddings
    with torch.no_grad():
        return (load(Embeddings(_config(**BERT)), i, "bert")(i["ids"], i["types"]),
                load(Embeddings(_config(**SCALED)), i, "scaled")(i["ids"]))


EMBEDDINGS = LOAD + '''
BERT = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_seq_len=12, positions="learned",
            type_vocab_size=2, embedding_norm=True, scale_embeddings=False, activation="gelu", eps=1e-12)
SCALED = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=1, max_seq_len=12, positions="none",
              scale_embeddings=True)
with torch.no_grad():
    bert = _load(Embeddings(EncoderConfig(**BERT)), "bert")
    result = [bert(inputs["ids"], inputs["types"]), _load(Embeddings(EncoderConfig(**SCALED)), "scaled")(inputs["ids"])]
'''


def _encoder_inputs(g):
    from attnlab.models.encoder import Encoder
    return {**random_weights(Encoder(_config(**PLAIN)), "post", g),
            **random_weights(Encoder(_config(**PLAIN, norm_first=True)), "pre", g), **_ids(g, types=False)}


def _encoder_reference(i):
    from attnlab.models.encoder import Encoder
    out = []
    for name, norm_first in (("post", False), ("pre", True)):
        with torch.no_grad():
            out.append(load(Encoder(_config(**PLAIN, norm_first=norm_first)), i, name)(i["ids"], i["mask"])[i["mask"]])
    return (*out, torch.tensor([1.0]))


ENCODER = LOAD + '''
PLAIN = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_seq_len=12, positions="none",
             scale_embeddings=False, activation="gelu")
result = []
for name, norm_first in (("post", False), ("pre", True)):
    with torch.no_grad():
        encoder = _load(Encoder(EncoderConfig(**PLAIN, norm_first=norm_first)), name)
        result.append(encoder(inputs["ids"], attention_mask=inputs["mask"])[inputs["mask"]])
# The notebook's test runs a float32 encoder with the paper's positions: it must run, and stay float32 (a float64
# table of positions, say, makes float64 embeddings that the float32 layers refuse).
with torch.no_grad():
    paper = Encoder(EncoderConfig(**{**PLAIN, "positions": "sinusoidal"})).eval()(inputs["ids"], inputs["mask"])
result.append(torch.tensor([float(paper.dtype == torch.float32)]))
'''


def _pool_inputs(g):
    mask = torch.rand(4, 7, generator=g) > 0.4
    mask[:, 0] = True
    mask[3] = False                                       # a row with no real token
    return {"hidden": torch.randn(4, 7, 5, generator=g, dtype=torch.float64), "mask": mask}


def _pool_reference(i):
    m = i["mask"].double()[..., None]
    return ((i["hidden"] * m).sum(1) / m.sum(1).clamp(min=1.0),)


def _capstone_inputs(g):
    from attnlab.models.encoder import Encoder
    return {**random_weights(Encoder(_config(**BERT)), "bert", g), **_ids(g, types=True)}


def _capstone_reference(i):
    from attnlab.models.encoder import Encoder
    from attnlab.layers.pooling import mean_pool
    with torch.no_grad():
        hidden = load(Encoder(_config(**BERT)), i, "bert")(i["ids"], i["mask"], i["types"])
    return (mean_pool(hidden, i["mask"]),)


CAPSTONE = LOAD + '''
BERT = dict(vocab_size=40, d_model=16, n_heads=4, d_ff=32, n_layers=2, max_seq_len=12, positions="learned",
            type_vocab_size=2, embedding_norm=True, scale_embeddings=False, activation="gelu", eps=1e-12)
with torch.no_grad():
    hidden = _load(Encoder(EncoderConfig(**BERT)), "bert")(inputs["ids"], inputs["mask"], inputs["types"])
    result = [mean_pool(hidden, inputs["mask"])]
'''

PROBES = {
    "test_sinusoidal_positional_encoding": Probe(
        inputs=_pe_inputs,
        code="import torch\npe = sinusoidal_positional_encoding(int(inputs['shape'][0]), int(inputs['shape'][1]))\n"
             "result = [pe.double(), torch.tensor([float(pe.dtype == torch.float32)])]",
        # the exercise returns float32 (its test checks the dtype): a correct table is within 1e-4 of the float64 one
        reference=lambda i: (*_pe_reference(i), torch.tensor([1.0])), rtol=0, atol=1e-4,
        refusals=("sinusoidal_positional_encoding(10, 7)", "sinusoidal_positional_encoding(0, 8)")),
    "test_embeddings": Probe(
        inputs=_embeddings_inputs, code=EMBEDDINGS, reference=_embeddings_reference,
        # ids outside the vocabulary (40), longer than max_seq_len (12), and not (B, T) integers
        refusals=("bert(torch.tensor([[0, 40]]))", "bert(torch.tensor([[-1, 0]]))",
                  "bert(torch.zeros(1, 13, dtype=torch.long))", "bert(torch.zeros(3))")),
    "test_encoder": Probe(inputs=_encoder_inputs, code=ENCODER, reference=_encoder_reference,
                          refusals=("encoder(inputs['ids'], attention_mask=torch.ones(3, 8, dtype=torch.bool))",)),
    "test_mean_pool": Probe(inputs=_pool_inputs, code="result = [mean_pool(inputs['hidden'], inputs['mask'])]",
                            reference=_pool_reference),
    "test_minilm_capstone": Probe(inputs=_capstone_inputs, code=CAPSTONE, reference=_capstone_reference),
}
