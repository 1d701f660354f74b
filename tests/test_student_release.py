"""`make student-release UPTO=chNN`: a copy for a graded class holds no answer to chapter NN or later, and
builds its website and runs its exercises on its own."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from coursekit.student_release import write_release
from coursekit.sync import chapter_notebooks
from tests.submissions import REPO, answer_lines, known_wrong, solution_code

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


def test_the_copy_serves_both_sites_and_checks_a_notebook_as_its_readme_says(tmp_path):
    """The copy's README names both sites and `make check`; its `make serve` serves site/ (not _build/html,
    which the copy does not have), the Chinese edition at /zh/; `make check NB=ch01` runs a notebook of work/
    from the top and says which test cells pass."""
    import urllib.request

    from tests.lab_session import free_port, set_up_copy, student_env
    from tests.test_student_path import completed

    site = tmp_path / "built"
    for page, text in {"index.html": "English home", "zh/index.html": "中文首页",
                       "book/ch01_qkv_softmax.html": "chapter 1", "book/ch02_multihead.html": "chapter 2"}.items():
        (site / page).parent.mkdir(parents=True, exist_ok=True)
        (site / page).write_text(text, encoding="utf-8")
    out = write_release("ch01", tmp_path / "copy", site=site)
    readme = (out / "README.md").read_text()
    for named in ("site/index.html", "site/zh/index.html", "English ⇄ 中文", "make check NB=", "make lab LANG=zh"):
        assert named in readme, f"the copy's README does not say {named!r}"
    assert not (out / "site" / "book" / "ch02_multihead.html").exists(), "a later chapter's page is in the copy"
    assert set_up_copy(out).returncode == 0

    port = free_port()
    server = subprocess.Popen(["make", "serve", f"PORT={port}"], cwd=out, env=student_env(), start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/zh/index.html", timeout=5) as response:
                    assert response.read().decode() == "中文首页"
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                time.sleep(0.1)
        else:
            raise AssertionError("make serve did not answer")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as response:
            assert response.read().decode() == "English home"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    notebook = out / "work" / "ch01_qkv_softmax" / "ch01_qkv_softmax.ipynb"
    notebook.parent.mkdir(parents=True)
    released = nbformat.read(out / "exercises" / "ch01_qkv_softmax" / "ch01_qkv_softmax.ipynb", as_version=4)
    nbformat.write(released, notebook)
    unwritten = subprocess.run(["make", "check", "NB=ch01"], cwd=out, env=student_env(), capture_output=True,
                               text=True, timeout=600)
    assert unwritten.returncode != 0 and ("FAILED  test_softmax_np: not written yet (softmax_np still raises "
                                          "NotImplementedError") in unwritten.stdout, (
        unwritten.stdout[-2000:] + unwritten.stderr[-2000:])
    assert "6 wait for exercises not written yet" in unwritten.stdout, unwritten.stdout[-2000:]
    # A wrong answer: numpy's assert_allclose puts its message after a newline; make check shows all of it.
    wrong = next(w for w in known_wrong("ch01_qkv_softmax") if w["name"] == "softmax_np_ignores_axis")
    answered = completed("ch01_qkv_softmax", notebook)
    next(c for c in answered.cells if c.metadata.get("nbgrader", {}).get("grade_id") == wrong["cell"]).source = wrong["code"]
    nbformat.write(answered, notebook)
    mistaken = subprocess.run(["make", "check", "NB=ch01"], cwd=out, env=student_env(), capture_output=True,
                              text=True, timeout=600)
    shown = mistaken.stdout.split("FAILED  test_softmax_np: AssertionError:", 1)[-1].split("passed  test_softmax")[0]
    assert mistaken.returncode != 0 and wrong["says"] in shown and "Mismatched elements" in shown, (
        mistaken.stdout[-3000:] + mistaken.stderr[-2000:])
    before = notebook.read_bytes()
    nbformat.write(completed("ch01_qkv_softmax", notebook), notebook)
    solved = notebook.read_bytes()
    done = subprocess.run(["make", "check", "NB=ch01"], cwd=out, env=student_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "passed  test_softmax_np" in done.stdout and "FAILED" not in done.stdout, (
        done.stdout[-2000:] + done.stderr[-2000:])
    assert notebook.read_bytes() == solved != before, "make check must leave the student's notebook as it was"


def test_upto_all_releases_every_chapter_and_runs_a_students_script_on_their_own_export(tmp_path):
    """`make student-release UPTO=all` (the end of a term): every chapter's pages and notebooks (both languages) and
    every chapter's reference code. In it a student runs `make export`, whose hint names a command that works from
    a fresh shell (no PYTHONPATH, no venv on PATH), and `make run SCRIPT=...`, which runs the script on the copy's
    Python with the student's own attnlab first."""
    from tests.lab_session import set_up_copy, student_env

    out = write_release("all", tmp_path / "copy")
    for assignment in CHAPTERS:
        for folder in ("exercises", "exercises-zh"):
            assert (out / folder / assignment / f"{assignment}.ipynb").is_file(), (folder, assignment)
        assert (out / "book" / f"{assignment}.md").is_file(), assignment
    body = lambda path: path.read_text(encoding="utf-8").split("\n", 2)[2]      # past the two-line header
    reference = {p.relative_to(REPO): body(p) for p in (REPO / "attnlab").rglob("*.py")}
    assert {p.relative_to(out): body(p) for p in (out / "attnlab").rglob("*.py")} == reference, (
        "UPTO=all gives every chapter's reference code, as the course's attnlab holds it")
    for forbidden in ("solutions", "autograde", "tests", "bench"):
        assert not (out / forbidden).exists(), forbidden
    assert "UPTO=all" in (out / "README.md").read_text(encoding="utf-8")

    assert set_up_copy(out).returncode == 0
    exported = subprocess.run(["make", "export"], cwd=out, env=student_env(), capture_output=True, text=True,
                              timeout=600)
    assert exported.returncode == 0 and "make run SCRIPT=your_script.py" in exported.stdout, exported.stdout[-2000:]
    hinted = exported.stdout.split("or:  ", 1)[1].splitlines()[0]          # PYTHONPATH=... .../python -P your_script.py
    script = out / "mine.py"
    script.write_text("import attnlab.layers.softmax as m, torch\nprint('FROM', m.__file__)\n", encoding="utf-8")
    ran = subprocess.run(["make", "run", "SCRIPT=mine.py"], cwd=out, env=student_env(), capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0 and f"FROM {out / '_student'}" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]
    hint = subprocess.run(hinted.replace("your_script.py", str(script)), shell=True, cwd=tmp_path, env=student_env(),
                          capture_output=True, text=True, timeout=600)
    assert hint.returncode == 0 and "FROM" in hint.stdout and "_student" in hint.stdout, hint.stderr[-2000:]
    nameless = subprocess.run(["make", "run"], cwd=out, env=student_env(), capture_output=True, text=True, timeout=600)
    assert nameless.returncode != 0 and "make run SCRIPT=" in nameless.stdout + nameless.stderr
