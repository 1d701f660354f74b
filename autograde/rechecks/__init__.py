"""Out-of-process re-checks of graded cells.

A test cell that passes in the student's kernel proves little: code that ran before it in the same kernel
can patch the comparison functions, rewrite later cells or swallow their exceptions. So, for each graded
cell, a probe calls the student's functions on fresh inputs in a separate sandboxed process (no kernel, no
IPython), saves the raw outputs, and the trusted grader compares them here with a reference that torch
computes. A cell that passes in the kernel but fails its re-check scores 0 and is flagged.

Each chapter has a module named after its assignment, with PROBES: {test cell grade_id: Probe}.
"""
from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Probe:
    inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]   # fresh inputs (float64 unless said)
    code: str                       # runs in the sandbox: `inputs` dict in scope, student's names too; sets `result`
    reference: Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, ...]]   # trusted
    rtol: float = 1e-9
    atol: float = 1e-11
    per_output: dict[int, tuple[float, float]] = field(default_factory=dict)   # output index -> its (rtol, atol)
    # Calls on bad input, each of which must raise ValueError, as the hidden tests require: run in the sandbox
    # after `code`, in its scope (so they may use what `code` built). A forged pass must not keep the points of a
    # function that accepts what its test says it must refuse.
    refusals: tuple[str, ...] = ()

    @property
    def sandbox_code(self) -> str:
        """`code`, then the refusals: their outcomes (1 ValueError, 0 no error, -1 another error) as one more output."""
        if not self.refusals:
            return self.code
        calls = "".join(f"\n    lambda: {call}," for call in self.refusals)
        return self.code + REFUSALS.format(calls=calls)


# `__ValueError__` is the runner's own ValueError, taken before any student cell ran: a student's `ValueError = ...`
# or a patched builtins cannot make another error count as a refusal.
REFUSALS = """
import torch
__refused = []
for __bad in ({calls}
):
    try:
        __bad()
    except __ValueError__:
        __refused.append(1.0)
    except Exception:
        __refused.append(-1.0)
    else:
        __refused.append(0.0)
result = [*(result if isinstance(result, (list, tuple)) else [result]), torch.tensor(__refused, dtype=torch.float64)]
"""


def probes_for(assignment: str) -> dict[str, Probe]:
    try:
        module = importlib.import_module(f"autograde.rechecks.{assignment}")
    except ModuleNotFoundError:
        return {}
    return module.PROBES


# Some references seed torch's global generator and build a model from it, exactly as their probe does in the
# sandbox; some inputs do the same to draw a module's weights. The class grader draws inputs and computes
# references in several threads at once, and a seeding interleaved with a seeded build hands the build another's
# numbers: the reference comes out wrong and an honest cell is flagged. So whatever touches it, one at a time.
_GLOBAL_RNG = threading.Lock()


def fresh_inputs(probes: dict[str, Probe], generator: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    """{probe: its inputs}, drawn from `generator`. Safe to call from concurrent grading threads."""
    with _GLOBAL_RNG:
        return {name: probe.inputs(generator) for name, probe in probes.items()}


def reference_outputs(probe: Probe, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The probe's trusted outputs on `inputs`. Safe to call from concurrent grading threads."""
    with _GLOBAL_RNG:
        return probe.reference(inputs)


def compare(expected: tuple[torch.Tensor, ...], got: dict[str, torch.Tensor], probe: Probe) -> str:
    """'' when `got` matches `expected`, else what differs (never the expected values themselves, nor the bad input)."""
    refused = got.get(str(len(expected))) if probe.refusals else None
    if len(got) != len(expected) + (1 if probe.refusals else 0):
        return f"returned {len(got)} tensors, expected {len(expected)}"
    for i, want in enumerate(expected):
        have = got.get(str(i))
        if have is None or tuple(have.shape) != tuple(want.shape):
            return f"output {i} has shape {None if have is None else tuple(have.shape)}, expected {tuple(want.shape)}"
        rtol, atol = probe.per_output.get(i, (probe.rtol, probe.atol))
        if not torch.allclose(have.to(torch.float64), want.to(torch.float64), rtol=rtol, atol=atol, equal_nan=False):
            return f"output {i} has wrong values"
    if probe.refusals:
        if refused is None or refused.numel() != len(probe.refusals):
            return "the checks of bad input gave no result"
        for i, outcome in enumerate(refused.tolist()):
            if outcome != 1.0:
                what = "was accepted" if outcome == 0.0 else "raised another error"
                return f"bad input {i + 1} of {len(probe.refusals)} {what}: it must raise ValueError"
    return ""
