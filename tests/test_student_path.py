"""A student's path through a graded class, end to end, for every chapter N:

1. the copy `make student-release UPTO=chN` makes;
2. chapter N's notebook completed with the reference answers (standing in for a student who solved it), every
   cell run in order as JupyterLab runs it (a kernel in the notebook's folder), on the copy's attnlab only;
3. `make export` in the copy, from work/ holding chapters 1..N completed, then the notebook run again with the
   student's own package first on the path: the closing demos then run on the student's code.

Every cell must run without an error, the demos included: a demo that imports a module the copy does not hold,
or that checks nothing, is what a student meets after "restart the kernel and run all cells"."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from coursekit.student_release import write_release
from coursekit.sync import chapter_notebooks
from tests.submissions import solution_code

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]

RUN_ALL = """
import json, sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=900, allow_errors=True, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
report = []
for cell in nb.cells:
    if cell.cell_type != "code":
        continue
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    name = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id")
    report.append({"cell": name, "error": f"{errors[0].ename}: {errors[0].evalue}" if errors else None,
                   "text": "".join(o.get("text", "") for o in cell.get("outputs", []))[-2000:]})
print(json.dumps(report))
"""

# The last cell of each run: where attnlab came from, so that a run on the full repository's package fails.
WHERE = "import attnlab, os\nprint('ATTNLAB FROM', os.path.realpath(attnlab.__file__))"


def completed(assignment: str, path: Path) -> nbformat.NotebookNode:
    """The released notebook at path with every answer cell holding the reference answer."""
    nb = nbformat.read(path, as_version=4)
    code = solution_code(assignment)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in code:
            cell.source = code[grade_id]
    return nb


def run_all(nb: nbformat.NotebookNode, folder: Path, pythonpath: list[Path], scratch: Path) -> list[dict]:
    nb = nbformat.from_dict(nb)
    nb.cells.append(nbformat.v4.new_code_cell(WHERE))
    scratch.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, scratch / "run.ipynb")
    env = {key: value for key, value in os.environ.items() if key != "ATTNLAB_GRADING"}
    env |= {"PYTHONPATH": os.pathsep.join(map(str, pythonpath)), "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    run = subprocess.run([sys.executable, "-c", RUN_ALL, str(scratch / "run.ipynb"), str(folder)], cwd=folder,
                         env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    import json
    return json.loads(run.stdout.strip().splitlines()[-1])


def check(report: list[dict], package: Path, what: str) -> None:
    failed = [f"{r['cell']}: {r['error']}\n{r['text'][-600:]}" for r in report if r["error"]]
    assert not failed, f"{what}: cells failed:\n" + "\n\n".join(failed)
    where = report[-1]["text"].split("ATTNLAB FROM", 1)[-1].strip()
    assert where.startswith(str(package.resolve())), f"{what}: attnlab came from {where}, not {package}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", CHAPTERS)
def test_a_student_runs_every_cell_in_the_copy_and_on_their_own_export(tmp_path, assignment):
    out = write_release(assignment[:4], tmp_path / "copy")
    folder = out / "exercises" / assignment
    nb = completed(assignment, folder / f"{assignment}.ipynb")
    report = run_all(nb, folder, [out], tmp_path / "reference")
    check(report, out / "attnlab", "on the copy's attnlab")
    tests = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    quiet = [r["cell"] for r in report if r["cell"] in tests and "visible checks passed" not in r["text"]]
    assert tests and not quiet, f"test cells that did not say their visible checks passed: {quiet}"

    # work/ as the student leaves it: every chapter of the copy completed, then `make export`
    for chapter in CHAPTERS[:CHAPTERS.index(assignment) + 1]:
        target = out / "work" / chapter / f"{chapter}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(completed(chapter, out / "exercises" / chapter / f"{chapter}.ipynb"), target)
    export = subprocess.run([sys.executable, "-m", "coursekit.export"], cwd=out, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(out)}, timeout=600)
    assert export.returncode == 0, export.stdout[-2000:] + export.stderr[-2000:]
    student = out / "_student"
    check(run_all(nb, out / "work" / assignment, [student, out], tmp_path / "export"), student / "attnlab",
          "on the student's own export")
