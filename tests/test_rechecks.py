"""The re-check probes (autograde/rechecks/), run in-process on trusted code: every probe passes on the reference
solution, and fails on each known-wrong implementation for the cells it must lose. (The sandboxed run of the
same probes is exercised by test_grading.py and test_hostile.py.)"""
import os

import pytest
import torch
import torch.nn.functional as F

from autograde.recheck import student_code_cells
from autograde.rechecks import compare, probes_for
from coursekit.sync import chapter_notebooks
from submissions import REPO, known_wrong, submission

WITH_PROBES = [nb.parent.name for nb in chapter_notebooks() if probes_for(nb.parent.name)]


# Probes may switch library functions off (chapter 1); in the sandbox that dies with the process, here it is undone.
LIBRARY = [(torch, "softmax"), (F, "softmax"), (torch.Tensor, "softmax"), (F, "scaled_dot_product_attention")]


def verdicts(assignment: str, replace: dict[str, str] | None = None, seed: int = 0) -> dict[str, str]:
    namespace = {"__name__": "__student__"}
    cwd = os.getcwd()
    os.chdir(REPO / "exercises" / assignment)          # where the notebook runs, next to its data files
    try:
        for source in student_code_cells(submission(assignment, replace)):
            try:
                exec(compile(source, "<cell>", "exec"), namespace)
            except Exception:                           # a wrong cell may raise; the probe then fails
                pass
        generator = torch.Generator().manual_seed(seed)
        out = {}
        for name, probe in probes_for(assignment).items():
            inputs = probe.inputs(generator)
            scope = dict(namespace, inputs={k: v.clone() for k, v in inputs.items()})
            library = [(owner, attr, getattr(owner, attr)) for owner, attr in LIBRARY]
            try:
                exec(compile(probe.code, name, "exec"), scope)
                result = scope["result"]
                got = {str(i): torch.as_tensor(t).detach()
                       for i, t in enumerate(result if isinstance(result, (list, tuple)) else [result])}
            except Exception as exc:
                out[name] = f"{type(exc).__name__}: {exc}"
                continue
            finally:
                for owner, attr, value in library:
                    setattr(owner, attr, value)
            out[name] = compare(probe.reference(inputs), got, probe)
        return out
    finally:
        os.chdir(cwd)


def test_chapters_with_probes():
    assert {"ch01_qkv_softmax", "ch05_decoding", "ch06_decoder"} <= set(WITH_PROBES)


@pytest.mark.parametrize("assignment", WITH_PROBES)
def test_reference_solution_passes_every_probe(assignment):
    for seed in (0, 1):
        assert verdicts(assignment, seed=seed) == {name: "" for name in probes_for(assignment)}


@pytest.mark.parametrize("assignment", WITH_PROBES)
def test_known_wrong_implementations_fail_their_probes(assignment):
    for wrong in known_wrong(assignment):
        got = verdicts(assignment, {wrong["cell"]: wrong["code"]})
        for cell in wrong["loses"]:
            if cell in got:
                assert got[cell], f"{wrong['name']} ({wrong['why']}) passes the re-check of {cell}"
