"""`make student-release UPTO=chNN`: a copy for a graded class holds no answer to chapter NN or later, and
builds its website and runs its exercises on its own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from coursekit.student_release import write_release
from coursekit.sync import chapter_notebooks
from tests.submissions import REPO, answer_lines, solution_code

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]


def _text_files(folder: Path):
    for path in folder.rglob("*"):
        if path.is_file():
            try:
                yield path, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


@pytest.mark.parametrize("upto", CHAPTERS)
def test_the_copy_holds_no_answer_of_its_chapter_or_later(tmp_path, upto):
    out = write_release(upto[:4], tmp_path / "copy")
    later = [a for a in CHAPTERS if a >= upto]
    answers = {line: a for a in later for line in answer_lines(a)}
    assert answers
    files = dict(_text_files(out))
    leaks = [f"{path.relative_to(out)}: {line!r} ({answers[line]})" for path, text in files.items()
             for line in answers if line in text]
    assert not leaks, "the student copy holds answers:\n" + "\n".join(leaks[:10])
    for forbidden in ("solutions", "autograde", "tests", "bench"):
        assert not (out / forbidden).exists(), f"{forbidden}/ must not be in a student copy"
    # what the class needs: every exercise up to UPTO, and the earlier chapters' reference code
    for assignment in CHAPTERS:
        assert (out / "exercises" / assignment).is_dir() == (assignment <= upto), assignment
        # the Chinese edition of the same notebooks (make lab LANG=zh)
        assert (out / "exercises-zh" / assignment).is_dir() == (assignment <= upto), assignment
    assert (out / "attnlab" / "__init__.py").is_file()


def test_make_sync_refuses_to_run_in_a_copy(tmp_path):
    out = write_release("ch03", tmp_path / "copy")
    run = subprocess.run([sys.executable, "-m", "coursekit.sync"], cwd=out, capture_output=True, text=True)
    assert run.returncode != 0 and "solutions" in run.stderr + run.stdout
    assert (out / "attnlab" / "layers" / "softmax.py").is_file(), "sync must not have removed the copy's attnlab"


RUN_NOTEBOOK = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=300, allow_errors=True, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
for cell in nb.cells:
    grading = cell.metadata.get("nbgrader", {})
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    if grading.get("grade"):
        text = "".join(o.get("text", "") for o in cell.outputs)
        print(cell.metadata["nbgrader"]["grade_id"], "PASSED" if "visible checks passed" in text and not errors
              else "FAILED " + (errors[0].ename + ": " + errors[0].evalue if errors else text[-300:]))
    elif errors:
        print("GIVEN CELL FAILED", errors[0].ename, errors[0].evalue)
"""


@pytest.mark.slow
def test_the_copy_builds_its_website_and_runs_its_exercises_alone(tmp_path):
    out = write_release("ch03", tmp_path / "copy")
    # The copy's own attnlab first on the path: nothing may come from the full repository's.
    env = {**os.environ, "PYTHONPATH": str(out), "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    jupyter_book = str(Path(sys.executable).with_name("jupyter-book"))
    build = subprocess.run([jupyter_book, "build", ".", "--all", "--builder", "html", "-W", "-n", "--keep-going"],
                           cwd=out, env=env, capture_output=True, text=True, timeout=1200)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-2000:]
    assert (out / "_build" / "html" / "book" / "ch01_qkv_softmax.html").is_file()
    assert (out / "_build" / "html" / "exercises" / "ch03_add_norm_ffn" / "ch03_add_norm_ffn.html").is_file()
    # chapter 3 completed as a student would, run in the copy's exercise folder on the copy's attnlab
    assignment = "ch03_add_norm_ffn"
    folder = out / "exercises" / assignment
    nb = nbformat.read(folder / f"{assignment}.ipynb", as_version=4)
    code = solution_code(assignment)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in code:
            cell.source = code[cell.metadata["nbgrader"]["grade_id"]]
    nbformat.write(nb, tmp_path / "completed.ipynb")
    run = subprocess.run([sys.executable, "-c", RUN_NOTEBOOK, str(tmp_path / "completed.ipynb"), str(folder)],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert lines and all(line.endswith("PASSED") for line in lines), run.stdout
    # and the untouched release: the given cells run, each exercise asks to be written
    run = subprocess.run([sys.executable, "-c", RUN_NOTEBOOK, str(folder / f"{assignment}.ipynb"), str(folder)],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    assert "GIVEN CELL FAILED" not in run.stdout, run.stdout
    assert all("NotImplementedError" in line for line in run.stdout.strip().splitlines()), run.stdout


def test_the_leak_check_finds_an_answer_put_into_a_copy(tmp_path):
    """The check above can fail: the full reference module of chapter 3 in a ch03 copy is found."""
    out = write_release("ch03", tmp_path / "copy")
    (out / "attnlab" / "layers" / "norm.py").write_text((REPO / "attnlab" / "layers" / "norm.py").read_text())
    answers = answer_lines("ch03_add_norm_ffn")
    found = [line for line in answers if line in (out / "attnlab" / "layers" / "norm.py").read_text()]
    assert found, "chapter 3's reference norm.py must contain chapter 3's solution lines"
