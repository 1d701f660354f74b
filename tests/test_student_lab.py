"""The student's side: JupyterLab serves exercises/ with nbgrader's student tools only, and a notebook runs
in its own folder with a python3 kernel, as JupyterLab runs it."""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import nbformat
from nbclient import NotebookClient

import pytest

from coursekit.lab import command
from coursekit.sync import chapter_notebooks
from coursekit.workspace import ensure_work
from tests.submissions import REPO, released, submission

ASSIGNMENT = "ch01_qkv_softmax"
ASSIGNMENTS = [nb.parent.name for nb in chapter_notebooks()]


def _run_in_exercise_folder(nb, assignment: str = ASSIGNMENT):
    """Execute like JupyterLab: the notebook's kernelspec, the notebook's folder as working directory."""
    client = NotebookClient(nb, timeout=300, allow_errors=True, kernel_name=nb.metadata.kernelspec.name,
                            resources={"metadata": {"path": str(REPO / "exercises" / assignment)}})
    client.execute()
    return nb


def _outputs(cell):
    return "".join(o.get("text", "") + o.get("evalue", "") for o in cell.get("outputs", []))


# The completed notebook of every chapter, run as JupyterLab runs it, passes its visible checks: tested with the
# student's whole path in test_student_path.py (in the student copy, then on the student's own export).


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_notebook_fails_each_test_with_not_implemented(assignment):
    nb = _run_in_exercise_folder(released(assignment), assignment)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if meta.get("grade"):
            assert errors and errors[0].ename == "NotImplementedError", _outputs(cell)
        elif meta.get("locked"):
            assert not errors, f"read-only cell {meta['grade_id']} must run cleanly: {_outputs(cell)}"


def test_jupyterlab_serves_the_exercises_with_student_tools_only(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ensure_work(REPO, tmp_path / "work", log=lambda _: None)
    args, env = command([f"--port={port}", "--IdentityProvider.token=course-test", "--ServerApp.open_browser=False"],
                        root_dir=tmp_path / "work")
    server = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": "token course-test"}

    def get(path):
        with urllib.request.urlopen(urllib.request.Request(base + path, headers=auth), timeout=10) as response:
            return response.read().decode()

    try:
        for _ in range(300):
            try:
                get("/api/status")
                break
            except OSError:
                if server.poll() is not None:
                    raise AssertionError(f"JupyterLab exited: {server.stderr.read()[-2000:]}")
                time.sleep(0.2)
        listing = json.loads(get(f"/api/contents/{ASSIGNMENT}"))
        assert f"{ASSIGNMENT}.ipynb" in [item["name"] for item in listing["content"]]
        notebook = json.loads(get(f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"))["content"]
        assert nbformat.from_dict(notebook).cells, "the notebook is served"
        page = get("/lab")
        config = json.loads(page.split('id="jupyter-config-data"', 1)[1].split(">", 1)[1].split("</script>", 1)[0])
        disabled = config.get("disabledExtensions", {})
        disabled = disabled if isinstance(disabled, dict) else {name: True for name in disabled}
        for plugin in ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"):
            assert disabled.get(plugin), f"{plugin} must be off in a student's lab"
        assert not disabled.get("@jupyter/nbgrader:validate-assignment"), "students keep the validate button"
        try:
            get("/formgrader")
            formgrader_served = True
        except urllib.error.HTTPError:
            formgrader_served = False
        assert not formgrader_served, "the instructor's formgrader must not run in a student's lab"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_refresh_brings_an_old_copy_up_to_date_and_keeps_the_answers(tmp_path):
    """A copy in work/ made from an older release (here: the module paths before attnlab was organised by
    role, and a test since changed) gets the release's given cells, keeps the learner's answers and added
    cells, and is saved as it was first. The refreshed notebook then passes its tests."""
    from coursekit.refresh import refresh
    from coursekit.workspace import RECORD

    release_path = REPO / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    old = submission(ASSIGNMENT)
    answers = {}
    for cell in old.cells:
        meta = cell.metadata.get("nbgrader", {})
        cell.source = cell.source.replace("attnlab.layers.", "attnlab.").replace("attnlab/layers/", "attnlab/")
        if meta.get("solution"):
            cell.source = "# my own comment\n" + cell.source
            answers[meta["grade_id"]] = cell.source
        elif meta.get("grade"):
            cell.source = cell.source + "\nprint('an older test')"
    mine = nbformat.v4.new_code_cell("scratch = 1 + 1   # a cell of my own")
    old.cells.insert(3, mine)
    work = tmp_path / "work"
    copy = work / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    copy.parent.mkdir(parents=True)
    nbformat.write(old, copy)

    assert refresh(copy, release_path, work, log=lambda _: None)
    backup = copy.with_name(f"{ASSIGNMENT}.before-refresh-1.ipynb")
    assert nbformat.read(backup, as_version=4).cells[3].source == mine.source, "the copy as it was is kept"
    new = nbformat.read(copy, as_version=4)
    release = nbformat.read(release_path, as_version=4)
    by_key = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in new.cells}
    for cell in release.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            got = by_key[meta["grade_id"]].source
            assert got.startswith("# my own comment\n") and "attnlab/layers/" in got, got[:200]
        elif meta.get("grade_id"):
            assert by_key[meta["grade_id"]].source == cell.source, f"{meta['grade_id']} is not the release's"
    assert [c.source for c in new.cells].count(mine.source) == 1, "the learner's own cell is kept, once"
    assert RECORD in {p.name for p in work.iterdir()}
    assert not refresh(copy, release_path, work, log=lambda _: None), "a refreshed copy is left alone"
    ran = _run_in_exercise_folder(new)
    for cell in ran.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            assert "visible checks passed" in _outputs(cell), _outputs(cell)


def test_refresh_keeps_a_second_copy_of_an_answer_and_adds_no_stale_given_cell(tmp_path):
    """A cell copied in JupyterLab keeps its grade_id: both copies of the answer stay. A given cell whose id
    moved is the release's, not the learner's, so it does not come back twice."""
    from coursekit.refresh import refreshed

    release = released(ASSIGNMENT)
    copy = submission(ASSIGNMENT)
    index = next(i for i, c in enumerate(copy.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    second = nbformat.from_dict(copy.cells[index])
    second.source = "# my working version, kept aside\n" + second.source
    second.id = "my-copy"
    copy.cells.insert(index + 1, second)
    prose = next(c for c in copy.cells if c.cell_type == "markdown" and c.source.strip())
    prose.id = "an-id-the-release-no-longer-uses"
    new = refreshed(copy, release)
    sources = [c.source for c in new.cells]
    assert sources.count(second.source) == 1, "the second copy of the answer is kept"
    assert sources.count(copy.cells[index].source) == 1, "the first copy is the answer"
    assert sources.count(prose.source) == 1, "a given cell whose id changed is not added again"


def test_refresh_reports_given_code_that_changed_inside_an_answer_cell(tmp_path):
    """A release that renames something in the code an answer cell gives (chapter 6 renamed its generator to
    lm_head) cannot rewrite the learner's cell, which holds the old line: make refresh names the lines to copy in."""
    from coursekit.refresh import refresh

    release_path = REPO / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    old = submission(ASSIGNMENT)
    answers = [c for c in old.cells if c.metadata.get("nbgrader", {}).get("solution") and "def " in c.source]
    answer, clean = answers[0], answers[1]
    given = next(line for line in answer.source.splitlines() if line.startswith("def "))
    older = given.replace("(", "_v0(", 1)                            # the name an older release gave
    answer.source = answer.source.replace(given, older)
    test = next(c for c in old.cells if c.metadata.get("nbgrader", {}).get("grade"))
    test.source += "\nprint('an older test')"                        # the release changed its tests too
    work = tmp_path / "work"
    copy = work / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    copy.parent.mkdir(parents=True)
    nbformat.write(old, copy)
    said = []
    assert refresh(copy, release_path, work, log=said.append)
    reports = [line for line in said if "answer cell" in line]
    key = answer.metadata["nbgrader"]["grade_id"]
    assert len(reports) == 1 and f"'{key}'" in reports[0] and given.strip() in reports[0], said
    assert f"'{clean.metadata['nbgrader']['grade_id']}'" not in reports[0]
    kept = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nbformat.read(copy, as_version=4).cells}
    assert older in kept[key], "the learner's text is not rewritten"
