"""Run the real grading CLI on a batch of notebooks and return its JSON results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

from autograde.config import CELL_TIMEOUT_S
from tests.cheats import cheat_submissions
from tests.submissions import REPO, known_wrong, released, submission, write

# The classes are graded under the grader's own cell limit, as an instructor's are: a stricter one made a solution's
# heaviest cell (chapter 10's Hopper compiles, 11 s alone) fail on a busy 2-core machine grading two at a time.
ZH, ZH_FOLDER = "zh-", "exercises-zh"   # student-id prefix and release folder of the Chinese submissions


def grade_files(assignment: str, files: list[Path], workspace: Path) -> dict[str, dict]:
    """{student id: result} from `python -m autograde grade ASSIGNMENT FILES --json`."""
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", assignment, *map(str, files), "--json", "--workers", "2",
                          "--workspace", str(workspace), "--cell-timeout", str(CELL_TIMEOUT_S)],
                         cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["student"]: r for r in json.loads(run.stdout)}
    assert len(results) == len(files), "every file gets exactly one result"
    return results


PER_SUBMISSION = 4      # known-wrong implementations graded together in one notebook, at most


def packed_wrongs(assignment: str) -> list[list[dict]]:
    """The known-wrong implementations in groups, each group one submission: a kernel and a re-check each cost
    seconds, and a class of 84 single mistakes was a quarter of the suite's time. Within a group each mistake
    edits its own cell and is expected to cost tests no other member costs, so every lost point still has one
    cause. What a group gives up is the check that a mistake leaves its partners' tests alone; the cap keeps
    that check covering most of each chapter's tests."""
    groups: list[list[dict]] = []
    for wrong in known_wrong(assignment):
        home = next((group for group in groups if len(group) < PER_SUBMISSION and all(
            wrong["cell"] != other["cell"] and not set(wrong["loses"]) & set(other["loses"]) for other in group)), None)
        if home is None:
            groups.append([wrong])
        else:
            home.append(wrong)
    return groups


def wrongs_id(group: list[dict]) -> str:
    return "wrongs-" + "-".join(w["name"] for w in group)     # a file name the grader keeps as the student id


def wrong_result(results: dict[str, dict], assignment: str, wrong: dict) -> tuple[dict, set[str]]:
    """The graded result of the submission holding `wrong`, and the tests its partners there are meant to cost."""
    group = next(g for g in packed_wrongs(assignment) if wrong in g)
    return results[wrongs_id(group)], {test for other in group if other is not wrong for test in other["loses"]}


def chapter_submissions(assignment: str) -> dict[str, nbformat.NotebookNode]:
    """{student id: notebook}: the solution, the untouched release, the known-wrong implementations in groups
    (packed_wrongs) and each cheat (cheats.py), all graded together by the `graded` fixture."""
    notebooks = {"solution": submission(assignment), "untouched": released(assignment)}
    notebooks |= {wrongs_id(group): submission(assignment, {w["cell"]: w["code"] for w in group})
                  for group in packed_wrongs(assignment)}
    # The same answers in the Chinese notebook (exercises-zh/): the same grade and feedback (test_zh_grading.py).
    first = packed_wrongs(assignment)[0]
    notebooks |= {ZH + "solution": submission(assignment, folder=ZH_FOLDER),
                  ZH + wrongs_id(first): submission(assignment, {w["cell"]: w["code"] for w in first}, folder=ZH_FOLDER)}
    return notebooks | cheat_submissions(assignment)


def grade_chapter(assignment: str, folder: Path) -> dict[str, dict]:
    """chapter_submissions graded in one CLI call: {student id: result}. The feedback pages are under
    folder/workspace/feedback/<student id>/<assignment>/."""
    files = [write(nb, folder / "submissions" / f"{name}.ipynb") for name, nb in chapter_submissions(assignment).items()]
    return grade_files(assignment, files, folder / "workspace")


def cells(result: dict) -> dict[str, dict]:
    return {c["cell"]: c for c in result["cells"]}
