"""Broken and tampered submissions through the real grading path (chapter 1), the class command, usage errors,
and the feedback page in a browser. One CLI run grades every submission, which also shows that broken ones
never stop the others."""
from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from grading import CELL_TIMEOUT_S, grade_files
from submissions import REPO, known_wrong, released, solution_code, submission, write

ASSIGNMENT = "ch01_qkv_softmax"
WRONG = known_wrong(ASSIGNMENT)


def _with_cell_removed(nb, grade_id):
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != grade_id]
    return nb


def _with_test_edited(nb, grade_id, source):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = source
            cell.metadata["nbgrader"]["points"] = 100
    return nb


def broken_cases():
    """name -> (notebook or raw bytes, expected score, expected error substring or None)."""
    ref = solution_code(ASSIGNMENT)
    inverted = next(w for w in WRONG if w["name"] == "sdpa_inverted_mask")
    return {
        "loops_forever": (submission(ASSIGNMENT, {"softmax_np": "#| export attnlab/softmax.py\nwhile True:\n    pass"}),
                          13, None),  # softmax_np never defined: loses test_softmax_np (3) only
        "raises": (submission(ASSIGNMENT, {"softmax": 'raise RuntimeError("oops")\n' + ref["softmax"]}),
                   5, None),          # softmax undefined: loses its tests (3 + 2) and both attention tests (3 + 3)
        "kills_kernel": (submission(ASSIGNMENT, {"attention_scores": "import os\nos._exit(1)"}),
                         8, None),    # attention_scores undefined: loses 2 + 3 + 3
        "deletes_a_test_cell": (_with_cell_removed(submission(ASSIGNMENT), "test_softmax_np"), 16, None),
        "edits_a_test_cell": (_with_test_edited(submission(ASSIGNMENT, {inverted["cell"]: inverted["code"]}),
                                                "test_sdpa_mask", "pass"), 13, None),
        "warns_on_stderr": (submission(ASSIGNMENT, {"softmax_np": ref["softmax_np"].replace(
            "    ### BEGIN SOLUTION", "").replace('"""\n    row_max', '"""\n    import warnings; warnings.warn("student warning")\n    row_max')}),
                            16, None),  # a warning printed to stderr by correct code costs nothing
        "invalid_json": (b'{"cells": [', 0, "not valid notebook JSON"),
        "empty_file": (b"", 0, "empty"),
    }


USED_WRONG = ("sdpa_inverted_mask", "sdpa_mask_minus_1e4", "softmax_np_ignores_axis")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every broken case, and the known-wrong ones used below, in one CLI call."""
    folder = tmp_path_factory.mktemp("submissions")
    files = [write(submission(ASSIGNMENT, {w["cell"]: w["code"]}), folder / f"wrong_{w['name']}.ipynb")
             for w in WRONG if w["name"] in USED_WRONG]
    for name, (content, _, _) in broken_cases().items():
        path = folder / f"broken_{name}.ipynb"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            write(content, path)
        files.append(path)
    return grade_files(ASSIGNMENT, files, tmp_path_factory.mktemp("workspace")), None


def _cells(result):
    return {c["cell"]: c for c in result["cells"]}


@pytest.mark.parametrize("name", list(broken_cases()))
def test_broken_submission_gets_what_it_earned(graded, name):
    _, expected, error = broken_cases()[name]
    result = graded[0][f"broken_{name}"]
    assert result["score"] == expected, result
    if error:
        assert error in result["error"]
    else:
        assert not result["error"], result["error"]


def test_killed_kernel_is_reported_on_the_cell(graded):
    result = graded[0]["broken_kills_kernel"]
    assert "KernelDied" in open(result["feedback"], encoding="utf-8").read()


def test_tampering_is_reported(graded):
    notes = " ".join(graded[0]["broken_edits_a_test_cell"]["notes"])
    assert "'test_sdpa_mask' was edited" in notes and "metadata of cell 'test_sdpa_mask'" in notes
    assert "'test_softmax_np' was deleted" in " ".join(graded[0]["broken_deletes_a_test_cell"]["notes"])


def test_known_wrong_caught_only_by_hidden_tests_still_loses(graded):
    """The -1e4 mask and the ignored axis pass every visible check; the hidden tests catch them."""
    for name, cell in [("wrong_sdpa_mask_minus_1e4", "test_sdpa_mask"), ("wrong_softmax_np_ignores_axis", "test_softmax_np")]:
        assert _cells(graded[0][name])[cell]["score"] == 0


def test_feedback_math_renders_offline_in_a_browser(graded, repo):
    from pathlib import Path

    from browser import browser

    feedback = Path(graded[0]["wrong_sdpa_inverted_mask"]["feedback"])
    with browser() as b:
        b.page.goto(feedback.as_uri(), wait_until="load")
        b.wait_for_math(minimum=5)
        text = b.page.inner_text("body")
        assert "Blocked positions must get weight exactly 0" in text   # the visible test's message reaches the student
        shots = repo / "_build" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        b.page.screenshot(path=str(shots / "feedback_ch01.png"), full_page=True)
        assert not b.remote_requests(), b.remote_requests()


def test_class_grades_every_submitted_folder_and_writes_csv(tmp_path):
    import csv

    workspace = tmp_path / "ws"
    for student, content in [("alice", submission(ASSIGNMENT)), ("bob", released(ASSIGNMENT)),
                             ("carol", b"not a notebook")]:
        folder = workspace / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        target = folder / ("renamed_by_student.ipynb" if student == "alice" else f"{ASSIGNMENT}.ipynb")
        target.write_bytes(content) if isinstance(content, bytes) else write(content, target)
    run = subprocess.run([sys.executable, "-m", "autograde", "class", ASSIGNMENT, "--workspace", str(workspace),
                          "--cell-timeout", str(CELL_TIMEOUT_S)], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "alice: 16 / 16" in run.stdout and "bob: 0 / 16" in run.stdout and "carol: 0 / 16" in run.stdout
    rows = {r["student"]: r for r in csv.DictReader((workspace / "grades.csv").open())}
    assert set(rows) == {"alice", "bob", "carol"}
    assert (rows["alice"]["score"], rows["bob"]["score"], rows["carol"]["score"]) == ("16", "0", "0")
    assert all(r["max_score"] == "16" for r in rows.values())
    assert "not valid notebook JSON" in rows["carol"]["note"]


def test_unknown_assignment_and_missing_file_are_usage_errors(tmp_path):
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", "ch99_nothing", "x.ipynb"], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "unknown assignment 'ch99_nothing'" in run.stderr
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", ASSIGNMENT, str(tmp_path / "missing.ipynb"),
                          "--workspace", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "no such file" in run.stderr
