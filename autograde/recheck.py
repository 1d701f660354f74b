"""The trusted half of the out-of-process re-check (see autograde/rechecks/__init__.py)."""
from __future__ import annotations

import hashlib
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
from autograde.sandbox_runner import GRACE_S, recheck_cells, recheck_source
from autograde.submission import recheck_steps, student_cell_number  # noqa: F401 - recheck_steps: the budgets' input
from autograde.untrusted import UntrustedFileError, read_bytes

# Cells the notebook's run ended with one of these errors (the sandbox runner's names) are left out of the re-check,
# or cut where the run stopped them (sandbox_runner.recheck_source). A cell the notebook never reached
# (SandboxedExecute's NotRun: its wall clock ran out first) is run here: it never had its chance, and the re-check's
# own limits hold it as they hold every step.
NOT_RUN = "NotRun"
MAX_RUNS = 3            # a re-check rerun without each step that ran past its limit, at most this often
BASE_WALL_S = 60        # the runner's start-up, beyond its steps


def recheck_wall_s(cell_timeout_s: int, steps: int) -> float:
    """Seconds one re-check run may take: each of its `steps` (a student cell, a probe) under the cell limit and the
    grace its watchdog gives, and the start-up. A run that keeps its per-step limits cannot run out of time as a
    whole, however slow the machine: only a step can, and that step alone is left out."""
    return BASE_WALL_S + max(steps, 1) * (cell_timeout_s + GRACE_S)


def student_cells(notebook: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """(notebook index, code as the re-check runs it) of every code cell that is not a test (recheck_source)."""
    return [(index, recheck_source(cell)) for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade")]


def student_code_cells(notebook: nbformat.NotebookNode) -> list[str]:
    """Every code cell that is not a test, in order, as the re-check runs it."""
    return recheck_cells(notebook)


IN_RUN_INPUTS = "in_run_inputs.safetensors"   # beside the sandbox's work folder, out of its reach
# There too, written by execute.SandboxedExecute: what the runner said of the re-check it ran after the notebook.
IN_RUN_RECHECK = "in_run_recheck.json"


def in_run_spec(assignment: str, folder: Path, cell_timeout_s: int, steps: int) -> bytes | None:
    """What the sandbox runner needs to re-check the notebook right after its last cell (sandbox_runner.recheck_here):
    every probe of the assignment and fresh secret inputs, handed over on a descriptor only the runner holds. The
    inputs are kept in `folder` (outside the sandbox) for the comparison; None where the assignment has no probes."""
    from safetensors.torch import save

    probes = probes_for(assignment) if assignment else {}
    if not probes:
        return None
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    flat = {f"{name}.{key}": value.contiguous()
            for name, values in fresh_inputs(probes, generator).items() for key, value in values.items()}
    save_file(flat, str(folder / IN_RUN_INPUTS))
    header = {"probes": {name: probe.sandbox_code for name, probe in probes.items()},
              "budget_s": recheck_wall_s(cell_timeout_s, steps)}
    return json.dumps(header).encode() + b"\n" + save(flat)


PROBE_FOLDER = re.compile(r"\.probe-[0-9a-f]{16}")


def in_run_verdicts(assignment: str, notebook: nbformat.NotebookNode, sandbox_dir: Path,
                    wanted: set[str]) -> dict[str, str] | None:
    """recheck()'s verdicts for the test cells in `wanted`, from the re-check the sandbox runner ran after the
    notebook (IN_RUN_RECHECK), or None where that cannot stand in for recheck(): no such run, a run the grader
    cut short or distrusts, one that did not end cleanly (a step stopped by its watchdog ends it so), one that ran
    other cells than recheck() would run, or left out a cell it must check. None costs only time: recheck() runs."""
    try:
        record = json.loads((sandbox_dir / IN_RUN_RECHECK).read_text())
        inputs_flat = load((sandbox_dir / IN_RUN_INPUTS).read_bytes())
    except (OSError, ValueError, Exception):  # noqa: BLE001 - safetensors raises its own error types
        return None
    ran = record.get("probe") or {}
    folder = sandbox_dir / "execute" / str(ran.get("folder"))
    digest = hashlib.sha256(json.dumps(student_code_cells(notebook)).encode()).hexdigest()
    probes = {name: probe for name, probe in probes_for(assignment).items() if name in wanted}
    if not (record.get("usable") and ran.get("status") == 0 and ran.get("cells") == digest
            and set(probes) <= set(ran.get("ran", [])) and PROBE_FOLDER.fullmatch(str(ran.get("folder")))
            and folder.is_dir() and not folder.is_symlink()):
        return None
    inputs = {name: {key.split(".", 1)[1]: value for key, value in inputs_flat.items() if key.split(".", 1)[0] == name}
              for name in probes}
    return _verdicts(probes, inputs, folder)


def recheck(assignment: str, notebook: nbformat.NotebookNode, work: Path, package: Path | None,
            cell_timeout_s: int = 60, passed: set[str] | None = None) -> dict[str, str]:
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
    wall_s = recheck_wall_s(cell_timeout_s, len(cells) + len(probes))
    skipped: dict[int, str] = {}          # position in `cells` -> why the re-check left it out
    stuck_probes: set[str] = set()
    for _ in range(MAX_RUNS):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        save_file({f"{name}.{key}": value.contiguous() for name, values in inputs.items() for key, value in values.items()},
                  str(work / "inputs.safetensors"))
        code = ["" if position in skipped else text for position, (_, text) in enumerate(cells)]
        (work / "code.json").write_text(json.dumps({"cells": code, "probes": {
            name: p.sandbox_code for name, p in probes.items() if name not in stuck_probes}}))
        run = sandbox.python(work, package, "probe", "code.json", "inputs.safetensors", ".", str(cell_timeout_s),
                             limits=sandbox.Limits(wall_s=wall_s))
        stuck = _stuck_step(work)
        if isinstance(stuck, int) and 0 <= stuck < len(cells) and stuck not in skipped:
            number = student_cell_number(notebook.cells[cells[stuck][0]])
            name = f"cell {number}" if number else f"cell {cells[stuck][0] + 1} of the graded notebook"
            skipped[stuck] = f"{name} ran past the {cell_timeout_s} s limit in the re-check"
        elif isinstance(stuck, str) and stuck in probes and stuck not in stuck_probes:
            stuck_probes.add(stuck)
        else:
            break
    why_skipped = "; ".join(skipped.values())
    verdicts = _verdicts({name: probe for name, probe in probes.items() if name not in stuck_probes}, inputs, work,
                         run.timed_out, wall_s)
    if why_skipped:
        verdicts = {name: verdict + f" (left out of the re-check: {why_skipped})" if verdict else verdict
                    for name, verdict in verdicts.items()}
    verdicts |= {name: f"your function ran past the {cell_timeout_s} s limit on the re-check's inputs"
                 for name in stuck_probes}
    return {name: verdicts[name] for name in probes}


def _verdicts(probes: dict, inputs: dict, folder: Path, timed_out: bool = False, wall_s: float = 0.0) -> dict[str, str]:
    """{test cell: '' or why not} from the probes' results in `folder`, compared with the reference on `inputs`."""
    verdicts = {}
    for name, probe in probes.items():
        try:
            got = load(read_bytes(folder / f"{name}.safetensors", 256 * 2**20))
        except (UntrustedFileError, Exception) as exc:  # safetensors raises its own error types for bad bytes
            reason = (f"it did not finish within {wall_s:g} s" if timed_out else _probe_error(folder, name) or str(exc))
            verdicts[name] = f"the re-check produced no result ({reason})"
        else:
            verdicts[name] = compare(reference_outputs(probe, inputs[name]), got, probe)
    return verdicts


def _probe_error(folder: Path, name: str) -> str:
    """What stopped probe `name`, as the runner reported it ("RuntimeError: library kernel aten._softmax is switched
    off"), or "". The report is written inside the sandbox, beside the student's code: it may only explain a verdict
    that is already a failure, never make one."""
    try:
        said = json.loads(read_bytes(folder / "report.json", 2**20))["probes"][name]
    except Exception:  # noqa: BLE001 - an unreadable or forged report explains nothing; the verdict stands
        return ""
    return f"your function raised {said[:200]}" if isinstance(said, str) and said != "ok" else ""


def _stuck_step(work: Path) -> int | str | None:
    """The step the runner's watchdog stopped, if it stopped one."""
    try:
        return json.loads(read_bytes(work / "stuck.json", 4096)).get("stuck")
    except Exception:  # noqa: BLE001 - whatever the file holds, it only ever means "no step was stopped"
        return None
