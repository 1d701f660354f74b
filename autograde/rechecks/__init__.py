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
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Probe:
    inputs: Callable[[torch.Generator], dict[str, torch.Tensor]]   # fresh inputs (float64 unless said)
    code: str                       # runs in the sandbox: `inputs` dict in scope, student's names too; sets `result`
    reference: Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, ...]]   # trusted
    rtol: float = 1e-9
    atol: float = 1e-11


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
    """'' when `got` matches `expected`, else what differs (never the expected values themselves)."""
    if len(got) != len(expected):
        return f"returned {len(got)} tensors, expected {len(expected)}"
    for i, want in enumerate(expected):
        have = got.get(str(i))
        if have is None or tuple(have.shape) != tuple(want.shape):
            return f"output {i} has shape {None if have is None else tuple(have.shape)}, expected {tuple(want.shape)}"
        if not torch.allclose(have.to(torch.float64), want.to(torch.float64), rtol=probe.rtol, atol=probe.atol,
                              equal_nan=False):
            return f"output {i} has wrong values"
    return ""
