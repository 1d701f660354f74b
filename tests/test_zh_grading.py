"""The Chinese notebooks grade like the English ones: the same answers in exercises-zh/<a>/<a>.ipynb and in
exercises/<a>/<a>.ipynb get the same score, the same per-test results and the same feedback page, through the
grading CLI (the submissions are graded with each chapter's class, grading.chapter_submissions)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from coursekit.sync import chapter_notebooks
from tests.grading import ZH, packed_wrongs, wrongs_id

pytestmark = pytest.mark.slow       # grades classes or drives the built site: not in `make test-fast`

ASSIGNMENTS = [nb.parent.name for nb in chapter_notebooks()]


def _comparable(result: dict) -> dict:
    # Timings differ from run to run; the student id is the file name, sha256 the file's (different prose).
    return {k: v for k, v in result.items() if k not in ("student", "sha256", "seconds", "timings", "feedback")}


def _feedback(results_folder: Path, student: str, assignment: str) -> str:
    pages = list((results_folder / "feedback" / student / assignment).glob("*.html"))
    assert len(pages) == 1, f"one feedback page for {student}, found {pages}"
    # The page names the student and the time of grading.
    text = pages[0].read_text(encoding="utf-8").replace(student, "STUDENT")
    return re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?", "TIME", text)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_chinese_submission_gets_the_english_grade_and_feedback(graded, graded_folder, assignment):
    results = graded(assignment)
    for name in ("solution", wrongs_id(packed_wrongs(assignment)[0])):
        english, chinese = results[name], results[ZH + name]
        assert _comparable(chinese) == _comparable(english), name
        workspace = graded_folder(assignment) / "workspace"
        assert _feedback(workspace, ZH + name, assignment) == _feedback(workspace, name, assignment), name
    # The solution passes every test and the known-wrong fails some: both kinds of feedback were compared.
    assert results[wrongs_id(packed_wrongs(assignment)[0])]["score"] < results["solution"]["score"]
