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
from autograde.rechecks import compare, fresh_inputs, probes_for, reference_outputs
from autograde.untrusted import UntrustedFileError, read_bytes

MAGIC = re.compile(r"^\s*[%!]")


# Cells the notebook run replaced by an error, so the re-check leaves them out too (the sandbox runner's names).
# A cell the notebook never reached (SandboxedExecute's NotRun: its wall clock ran out first) is run here: it
# never had its chance, and the re-check's own limits hold it as they hold every step.
SKIPPED_IN_NOTEBOOK = ("KernelDied", "CellStopped")
NOT_RUN = "NotRun"
MAX_RUNS = 3            # a re-check rerun without each step that ran past its limit, at most this often
BASE_WALL_S = 60        # the runner's start-up and the probes, beyond the student's slow cells


MAX_NOTEBOOK_TIMEOUTS = 4   # the notebook's own wall clock, in cell timeouts (grading.NOTEBOOK_TIMEOUTS)


def recheck_wall_s(cell_timeout_s: int, notebook_s: float) -> float:
    """Seconds one re-check run may take: as long as the same cells took in the notebook (measured by the
    grader, outside the sandbox), so slow but honest cells fit, plus room for the probes and a margin."""
    return BASE_WALL_S + 2 * cell_timeout_s + min(max(notebook_s, 0.0), MAX_NOTEBOOK_TIMEOUTS * cell_timeout_s)


def _error_names(cell) -> set[str]:
    return {str(o.get("ename")) for o in cell.get("outputs", []) if o.get("output_type") == "error"}


def student_cells(notebook: nbformat.NotebookNode) -> list[tuple[int, str, set[str]]]:
    """(notebook index, code, error names in the notebook run) of every code cell that is not a test.

    IPython-only lines (%magic, !shell) are dropped: the re-check runs plain Python. A cell that killed the
    kernel, or had to be stopped, was replaced in the notebook run, so it is left out here too.
    """
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
            continue
        errors = _error_names(cell)
        code = "" if errors & set(SKIPPED_IN_NOTEBOOK) else \
            "\n".join(line for line in cell.source.splitlines() if not MAGIC.match(line))
        cells.append((index, code, errors))
    return cells


def student_code_cells(notebook: nbformat.NotebookNode) -> list[str]:
    """Every code cell that is not a test, in order, as the re-check runs it."""
    return [code for _, code, _ in student_cells(notebook)]


def recheck(assignment: str, notebook: nbformat.NotebookNode, work: Path, package: Path | None,
            cell_timeout_s: int = 60, notebook_s: float = 0.0, passed: set[str] | None = None) -> dict[str, str]:
    """{test cell: '' if the student's code gives the reference's outputs on fresh inputs, else why not}.

    Only the test cells in `passed` are re-checked (all when None): those that earned points in the notebook,
    which the re-check confirms or takes away, and those the notebook never reached (worker.grade), which it may
    grade. A cell that failed in the notebook has nothing to gain, and a submission that earned nothing (an
    untouched release) costs no re-check at all.

    Each step (a student cell, a probe) is interrupted at the cell timeout, as in the notebook. A step that
    ignores the interrupt is stopped by the runner's watchdog, and the re-check runs again without it: a
    student's own slow cell costs its time, never a flag, unless the functions the probes call are missing
    without it. A probe whose function runs past the limit on the re-check's inputs fails.
    """
    probes = {name: probe for name, probe in probes_for(assignment).items() if passed is None or name in passed}
    if not probes:
        return {}
    # A fresh secret seed: the inputs cannot be known, or their answers prepared, in advance.
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    inputs = fresh_inputs(probes, generator)
    cells = student_cells(notebook)
    wall_s = recheck_wall_s(cell_timeout_s, notebook_s)
    skipped: dict[int, str] = {}          # position in `cells` -> why the re-check left it out
    stuck_probes: set[str] = set()
    for _ in range(MAX_RUNS):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        save_file({f"{name}.{key}": value.contiguous() for name, values in inputs.items() for key, value in values.items()},
                  str(work / "inputs.safetensors"))
        code = ["" if position in skipped else text for position, (_, text, _) in enumerate(cells)]
        (work / "code.json").write_text(json.dumps({"cells": code, "probes": {
            name: p.sandbox_code for name, p in probes.items() if name not in stuck_probes}}))
        run = sandbox.python(work, package, "probe", "code.json", "inputs.safetensors", ".", str(cell_timeout_s),
                             limits=sandbox.Limits(wall_s=wall_s))
        stuck = _stuck_step(work)
        if isinstance(stuck, int) and 0 <= stuck < len(cells) and stuck not in skipped:
            skipped[stuck] = f"cell {cells[stuck][0] + 1} ran past the {cell_timeout_s} s limit in the re-check"
        elif isinstance(stuck, str) and stuck in probes and stuck not in stuck_probes:
            stuck_probes.add(stuck)
        else:
            break
    why_skipped = "; ".join(skipped.values())
    verdicts = {}
    for name, probe in probes.items():
        if name in stuck_probes:
            verdicts[name] = f"your function ran past the {cell_timeout_s} s limit on the re-check's inputs"
            continue
        try:
            got = load(read_bytes(work / f"{name}.safetensors", 256 * 2**20))
        except (UntrustedFileError, Exception) as exc:  # safetensors raises its own error types for bad bytes
            reason = (f"it did not finish within {wall_s:g} s" if run.timed_out else str(exc))
            verdicts[name] = f"the re-check produced no result ({reason})"
        else:
            verdicts[name] = compare(reference_outputs(probe, inputs[name]), got, probe)
        if verdicts[name] and why_skipped:
            verdicts[name] += f" (left out of the re-check: {why_skipped})"
    return verdicts


def _stuck_step(work: Path) -> int | str | None:
    """The step the runner's watchdog stopped, if it stopped one."""
    try:
        return json.loads(read_bytes(work / "stuck.json", 4096)).get("stuck")
    except Exception:  # noqa: BLE001 - whatever the file holds, it only ever means "no step was stopped"
        return None
