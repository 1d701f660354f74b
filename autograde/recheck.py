"""The trusted half of the out-of-process re-check (see autograde/rechecks/__init__.py)."""
from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path

import nbformat
import torch
from safetensors.torch import load, save_file

from autograde import sandbox
from autograde.rechecks import compare, probes_for
from autograde.untrusted import UntrustedFileError, read_bytes

MAGIC = re.compile(r"^\s*[%!]")


def student_code_cells(notebook: nbformat.NotebookNode) -> list[str]:
    """Every code cell that is not a test, in order: the student's solutions, the given cells, added cells.

    The re-check mirrors the notebook run: a cell that killed the kernel there is skipped here too.
    IPython-only lines (%magic, !shell) are dropped: the re-check runs plain Python.
    """
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        died = any(o.get("ename") in ("KernelDied", "NotRun") for o in cell.get("outputs", []))
        cells.append("" if died else "\n".join(line for line in cell.source.splitlines() if not MAGIC.match(line)))
    return cells


def recheck(assignment: str, notebook: nbformat.NotebookNode, work: Path, package: Path | None,
            cell_timeout_s: int = 60, wall_s: float = 300) -> dict[str, str]:
    """{test cell: '' if the student's code gives the reference's outputs on fresh inputs, else why not}."""
    probes = probes_for(assignment)
    if not probes:
        return {}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # A fresh secret seed: the inputs cannot be known, or their answers prepared, in advance.
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    inputs = {name: probe.inputs(generator) for name, probe in probes.items()}
    save_file({f"{name}.{key}": value.contiguous() for name, values in inputs.items() for key, value in values.items()},
              str(work / "inputs.safetensors"))
    (work / "code.json").write_text(json.dumps({"cells": student_code_cells(notebook),
                                                 "probes": {name: p.code for name, p in probes.items()}}))
    run = sandbox.python(work, package, "probe", "code.json", "inputs.safetensors", ".", str(cell_timeout_s),
                         limits=sandbox.Limits(wall_s=wall_s))
    verdicts = {}
    for name, probe in probes.items():
        try:
            got = load(read_bytes(work / f"{name}.safetensors", 256 * 2**20))
        except (UntrustedFileError, Exception) as exc:  # safetensors raises its own error types for bad bytes
            reason = "timed out" if run.timed_out else str(exc)
            verdicts[name] = f"the re-check produced no result ({reason})"
            continue
        verdicts[name] = compare(probe.reference(inputs[name]), got, probe)
    return verdicts
