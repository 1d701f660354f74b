"""Re-checks for chapter 1 (see autograde/rechecks/__init__.py). References: torch.softmax and
F.scaled_dot_product_attention, with the course's convention that a fully masked row is all zeros."""
import math

import torch
import torch.nn.functional as F

from autograde.rechecks import Probe

NINF = float("-inf")


def _softmax_zero_rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.nan_to_num(torch.softmax(x, dim=dim), nan=0.0)


def _masked_logits(g: torch.Generator, shape) -> torch.Tensor:
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 30
    x = x.masked_fill(torch.rand(shape, generator=g) < 0.3, NINF)
    x[0, 1] = NINF                                        # one fully masked row (along the last dim)
    return x


def _qkv(g: torch.Generator):
    return {"q": torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) * 3,
            "k": torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64) * 3,
            "v": torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64)}


def _mask_inputs(g: torch.Generator):
    inputs = _qkv(g)
    mask = torch.rand(2, 3, 5, 7, generator=g) > 0.5
    mask[1, 2, 3] = False                                 # a query with nothing to attend to
    inputs["mask"] = mask
    return inputs


# The exercises ask for softmax and attention written by hand: torch's softmax and attention kernels are refused
# while the re-check calls the student's functions, at the dispatcher, where every route to them arrives as the same
# operator: torch.softmax, F.softmax, log_softmax(...).exp(), torch.ops.aten.*, a name saved before the switch
# (`_sm = torch.softmax`). F.scaled_dot_product_attention arrives as a fused kernel (_scaled_dot_product_*) or,
# taken apart on its math path, as a softmax; nn.MultiheadAttention's fast path as _native_multi_head_attention.
REFUSED_KERNELS = ("softmax", "scaled_dot_product", "multi_head_attention")
LIBRARY_OFF = ("import torch\n"
               "from torch.utils._python_dispatch import TorchDispatchMode\n"
               "class _LibraryOff(TorchDispatchMode):\n"
               "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
               "        name = func.overloadpacket.__name__\n"
               f"        if any(part in name for part in {REFUSED_KERNELS!r}):\n"
               "            raise RuntimeError('write softmax and attention yourself: torch kernel aten.' + name\n"
               "                               + ' is switched off while the re-check calls your function')\n"
               "        return func(*args, **(kwargs or {}))\n")


def library_off(call: str) -> str:
    """Probe code that sets result = `call` with torch's softmax and attention kernels refused (REFUSED_KERNELS)."""
    return LIBRARY_OFF + f"with _LibraryOff():\n    result = {call}\n"


# Float32 input must give float32 output, as the hidden tests require of every function here (the values are checked
# in float64, where a function that computes in float32 fails anyway): one flag per call, 1.0 when it does.
def _float32_flags(call: str) -> str:
    """Probe code: `flags` = [1.0 if every tensor `call` returns is float32 else 0.0]."""
    return (f"out32 = {call}\n"
            "out32 = out32 if isinstance(out32, (tuple, list)) else [out32]\n"
            "flags = torch.tensor([float(all(t.dtype == torch.float32 for t in out32))])\n")


PROBES = {
    "test_softmax_np": Probe(
        inputs=lambda g: {"x": (torch.randn(3, 4, 6, generator=g, dtype=torch.float64) * 400),
                          "x32": torch.randn(4, 5, generator=g)},
        # the values in float64
        code="import numpy, torch\n"
             "result = [torch.from_numpy(numpy.asarray(softmax_np(inputs['x'].numpy(), axis=a), dtype=numpy.float64))"
             " for a in (0, 1, -1)]\n"
             "ints = numpy.asarray(softmax_np(numpy.array([[1, 2, 3]])))\n"
             "x32 = numpy.asarray(softmax_np(inputs['x32'].numpy()))\n"
             "result.append(torch.tensor([float(x32.dtype == numpy.float32),\n"
             "                            float(numpy.issubdtype(ints.dtype, numpy.floating))]))\n"
             "result.append(torch.from_numpy(ints.astype(numpy.float64)))",
        # float32 logits give float32 weights, and integer logits floating-point ones (the hidden tests' dtype rules)
        reference=lambda i: (*(torch.softmax(i["x"], dim=a) for a in (0, 1, -1)), torch.tensor([1.0, 1.0]),
                             torch.softmax(torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64), dim=-1))),
    "test_softmax": Probe(
        inputs=lambda g: {"x": torch.randn(2, 5, 7, generator=g, dtype=torch.float64) * 300},
        code=library_off("[softmax(inputs['x'], dim=d) for d in (0, 1, 2)]")
             + _float32_flags("softmax(inputs['x'].float(), dim=-1)") + "result.append(flags)",
        reference=lambda i: (*(torch.softmax(i["x"], dim=d) for d in (0, 1, 2)), torch.tensor([1.0]))),
    "test_softmax_masked": Probe(
        inputs=lambda g: {"x": _masked_logits(g, (3, 4, 6))},
        code=library_off("softmax(inputs['x'], dim=-1)")
             + _float32_flags("softmax(inputs['x'].float(), dim=-1)") + "result = [result, flags]",
        reference=lambda i: (_softmax_zero_rows(i["x"], -1), torch.tensor([1.0]))),
    "test_attention_scores": Probe(
        inputs=_qkv,
        code="import torch\nresult = [attention_scores(inputs['q'], inputs['k'])]\n"
             + _float32_flags("attention_scores(inputs['q'].float(), inputs['k'].float())") + "result.append(flags)",
        reference=lambda i: (i["q"] @ i["k"].transpose(-2, -1) / math.sqrt(8), torch.tensor([1.0]))),
    "test_sdpa": Probe(
        inputs=_qkv,
        code=library_off("list(scaled_dot_product_attention(inputs['q'], inputs['k'], inputs['v']))")
             + _float32_flags("scaled_dot_product_attention(*(inputs[n].float() for n in 'qkv'))")
             + "result.append(flags)",
        reference=lambda i: (F.scaled_dot_product_attention(i["q"], i["k"], i["v"]),
                             torch.softmax(i["q"] @ i["k"].transpose(-2, -1) / math.sqrt(8), dim=-1),
                             torch.tensor([1.0]))),
    "test_sdpa_mask": Probe(
        inputs=_mask_inputs,
        code=library_off("scaled_dot_product_attention(inputs['q'], inputs['k'], inputs['v'], mask=inputs['mask'])")
             + _float32_flags("scaled_dot_product_attention(*(inputs[n].float() for n in 'qkv'), mask=inputs['mask'])")
             + "result = [*result, flags]",
        reference=lambda i: (F.scaled_dot_product_attention(i["q"], i["k"], i["v"], attn_mask=i["mask"]),
                             _softmax_zero_rows((i["q"] @ i["k"].transpose(-2, -1) / math.sqrt(8))
                                                .masked_fill(~i["mask"], NINF), -1),
                             torch.tensor([1.0]))),
}
