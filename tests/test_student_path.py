"""A student's path through a graded class, end to end, for every chapter N, as the student takes it:

1. the copy `make student-release UPTO=chN` makes, set up by its own `make setup` in a shell without PYTHONPATH
   (tests/lab_session.py);
2. its own `make lab` (in Chinese, `make lab LANG=zh`, for the even chapters), and chapter N's notebook in work/
   completed with the reference answers (standing in for a student who solved it), every cell run in order
   through that JupyterLab's kernel, on the copy's attnlab only: `import attnlab` works because `make setup`
   made it importable, or the first cell fails;
3. `make export` in the copy, from work/ holding chapters 1..N completed, then the notebook run again on the
   student's own package (`PYTHONPATH=_student`, as the README says): the closing demos then run on the
   student's code; and `make chat`, the command the README gives, where the copy reaches chapter 7.

Every cell must run without an error, the demos included: a demo that imports a module the copy does not hold,
or that checks nothing, is what a student meets after "restart the kernel and run all cells"."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import nbformat
import pytest

from coursekit.student_release import write_release
from coursekit.sync import chapter_notebooks
from tests.lab_session import Lab, copy_python, set_up_copy, student_env
from tests.submissions import solution_code

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]

RUN_ALL = """
import json, os, nbformat
from nbclient import NotebookClient
notebook, folder = os.environ.pop("RUN_ARGS").splitlines()
nb = nbformat.read(notebook, as_version=4)
NotebookClient(nb, timeout=900, allow_errors=True, kernel_name="python3",
               resources={"metadata": {"path": folder}}).execute()
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


def run_all(nb: nbformat.NotebookNode, folder: Path, copy: Path, scratch: Path,
            pythonpath: list[Path] | None = None) -> list[dict]:
    """Every cell of nb run in order by the copy's own python, in a kernel in `folder`."""
    nb = nbformat.from_dict(nb)
    nb.cells.append(nbformat.v4.new_code_cell(WHERE))
    scratch.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, scratch / "run.ipynb")
    extra = {"PYTHONPATH": os.pathsep.join(map(str, pythonpath))} if pythonpath else {}
    run = copy_python(copy, RUN_ALL, folder, extra | {"RUN_ARGS": f"{scratch / 'run.ipynb'}\n{folder}"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def check(report: list[dict], package: Path, what: str) -> None:
    failed = [f"{r['cell']}: {r['error']}\n{r['text'][-600:]}" for r in report if r["error"]]
    assert not failed, f"{what}: cells failed:\n" + "\n\n".join(failed)
    where = report[-1]["text"].split("ATTNLAB FROM", 1)[-1].strip()
    assert where.startswith(str(package.resolve())), f"{what}: attnlab came from {where}, not {package}"


CHAT_QUESTION = "What is the capital of France?\n"


def chat(copy: Path, attnlab: str = "") -> str:
    """`make chat` in the copy, a question typed at its prompt, then the end of the input."""
    run = subprocess.run(["make", "chat"] + ([f"ATTNLAB={attnlab}"] if attnlab else []), cwd=copy,
                         env=student_env(), input=CHAT_QUESTION, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"make chat {attnlab} failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    return run.stdout


@pytest.mark.slow
@pytest.mark.parametrize("assignment", CHAPTERS)
def test_a_student_runs_every_cell_in_the_copy_and_on_their_own_export(tmp_path, assignment):
    number = int(assignment[2:4])
    language = "zh" if number % 2 == 0 else None     # both editions, every other chapter
    out = write_release(assignment[:4], tmp_path / "copy")
    setup = set_up_copy(out)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-3000:]

    with Lab(out, language) as lab:
        path = f"{assignment}/{assignment}.ipynb"
        given = nbformat.read(out / "work" / path, as_version=4)
        edition = given.metadata.get("course", {}).get("language", "en")
        assert edition == ("zh_CN" if language else "en"), f"make lab LANG={language} gave work/ the {edition} notebook"
        # in a clean shell, from the notebook's folder: the copy's python imports the copy's attnlab
        where = copy_python(out, "import attnlab, os; print(os.path.realpath(attnlab.__file__))", out / "work" / assignment)
        assert where.returncode == 0 and where.stdout.strip().startswith(str(out.resolve() / "attnlab")), (
            f"import attnlab from work/ after the copy's make setup: {where.stdout}{where.stderr[-1500:]}")
        # the student's answers, saved in work/, run through the lab's own kernel
        nb = completed(assignment, out / "work" / path)
        saved = nbformat.from_dict(nb)
        saved.cells.append(nbformat.v4.new_code_cell(WHERE))
        nbformat.write(saved, out / "work" / path)
        report = lab.run_notebook(path)
    check(report, out / "attnlab", f"make lab{' LANG=zh' if language else ''}, the copy's attnlab")
    tests = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    quiet = [r["cell"] for r in report if r["cell"] in tests and "visible checks passed" not in r["text"]]
    assert tests and not quiet, f"test cells that did not say their visible checks passed: {quiet}"

    # work/ as the student leaves it: every chapter of the copy completed, then the copy's `make export`
    for chapter in CHAPTERS[:CHAPTERS.index(assignment)]:
        target = out / "work" / chapter / f"{chapter}.ipynb"
        nbformat.write(completed(chapter, target), target)
    export = subprocess.run(["make", "export"], cwd=out, capture_output=True, text=True, env=student_env(),
                            timeout=600)
    assert export.returncode == 0, export.stdout[-2000:] + export.stderr[-2000:]
    student = out / "_student"
    check(run_all(nb, out / "work" / assignment, out, tmp_path / "export", [student]), student / "attnlab",
          "on the student's own export")

    # the chat of chapter 7: on the student's export in the chapter 7 copy, on the copy's attnlab from chapter 8 on
    if number == 7:
        assert "Paris" in chat(out, "_student")
    if number == 8:
        assert "Paris" in chat(out)
