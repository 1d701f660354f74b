"""Every chapter through the real grading path (python -m autograde grade --json):
the solution scores full marks, the untouched release scores 0, and each known-wrong implementation
loses points exactly in the test cells it names, while the chapter's other exercises keep theirs.
The submissions of each chapter are graded once per session (the `graded` fixture in conftest.py)."""
from __future__ import annotations

import re

import pytest

from coursekit.sync import chapter_notebooks
from tests.grading import cells, wrong_result
from tests.submissions import known_wrong, released, solution_code

pytestmark = pytest.mark.slow       # grades classes or drives the built site: not in `make test-fast`

ASSIGNMENTS = [nb.parent.name for nb in chapter_notebooks()]
HIDDEN_MARK = "### BEGIN HIDDEN TESTS"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_scores_full_marks(graded, assignment):
    result = graded(assignment)["solution"]
    assert result["max_score"] > 0 and result["score"] == result["max_score"], result


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_solution_is_re_checked_in_its_notebooks_sandbox(graded, assignment):
    """The re-check ran after the last cell, in the notebook's own sandbox (sandbox_runner.recheck_here), and the
    grader used it: a sandbox of its own for the re-check is the fallback, for runs that did not end cleanly. (Were
    the fast path refused for every submission, say because the cells it ran differ from the grader's, grades would
    stay right and only take longer: this test is what notices.)"""
    timings = graded(assignment)["solution"]["timings"]
    assert timings.get("recheck_in_run") == 1.0, timings


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_scores_zero(graded, assignment):
    result = graded(assignment)["untouched"]
    assert result["score"] == 0 and not result["error"], result
    assert all(c["error"].startswith("NotImplementedError") for c in result["cells"]), result["cells"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_exercise_has_known_wrong_implementations(assignment):
    wrong = known_wrong(assignment)
    assert len(wrong) >= 3, f"{assignment}: at least three known-wrong implementations"
    assert {w["cell"] for w in wrong} == set(solution_code(assignment)), "every exercise has a known-wrong twin"


@pytest.mark.parametrize("assignment,wrong", [(a, w) for a in ASSIGNMENTS for w in known_wrong(a)],
                         ids=[f"{a}/{w['name']}" for a in ASSIGNMENTS for w in known_wrong(a)])
def test_known_wrong_implementation_loses_points(graded, assignment, wrong):
    result, partners_cost = wrong_result(graded(assignment), assignment, wrong)
    # graded cell by cell: "could not be graded" would also score less, and prove nothing
    assert not result["error"] and result["cells"], f"{wrong['name']} was not graded: {result['error']}"
    assert result["score"] < result["max_score"], f"{wrong['name']} ({wrong['why']}) was not caught"
    for name, cell in cells(result).items():
        if name in wrong["loses"]:
            assert cell["score"] < cell["max_score"], f"{name} should catch {wrong['name']}: {wrong['why']}"
        elif name not in partners_cost:
            # The other exercises are graded in isolation: one mistake costs only the tests that use it.
            assert cell["score"] == cell["max_score"], f"{name} lost points for {wrong['name']}: {cell['error']}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_shows_no_hidden_test(graded, assignment):
    hidden_lines = set()
    source = next(nb for nb in chapter_notebooks() if nb.parent.name == assignment)
    import nbformat
    for cell in nbformat.read(source, as_version=4).cells:
        if HIDDEN_MARK in cell.source:
            hidden = cell.source.split(HIDDEN_MARK, 1)[1].split("### END HIDDEN TESTS")[0]
            hidden_lines |= {line.strip() for line in hidden.splitlines() if len(line.strip()) > 25}
    visible = {line.strip() for c in released(assignment).cells for line in c.source.splitlines()}
    hidden_lines -= visible
    assert hidden_lines
    for name, result in graded(assignment).items():
        html = open(result["feedback"], encoding="utf-8").read()
        import html as html_lib
        text = html_lib.unescape(html)
        leaked = [line for line in hidden_lines if line in text]
        assert not leaked, f"{assignment}/{name}: feedback shows hidden test lines {leaked[:2]}"
        assert "BEGIN HIDDEN" not in text
        assert not re.search(r"<(?:script|link)[^>]+(?:src|href)=[\"'](?:https?:)?//", html), "feedback loads a remote file"


@pytest.mark.parametrize("assignment,wrong", [(a, w) for a in ASSIGNMENTS for w in known_wrong(a) if w["says"]],
                         ids=[f"{a}/{w['name']}" for a in ASSIGNMENTS for w in known_wrong(a) if w["says"]])
def test_feedback_names_the_mistake(graded, assignment, wrong):
    """The student's feedback and the instructor's results state the failed assert's message in full."""
    import html as html_lib
    result, _ = wrong_result(graded(assignment), assignment, wrong)
    message = cells(result)[wrong["loses"][0]]["error"]
    assert wrong["says"] in message, f"{wrong['name']}: the results say {message!r}, not {wrong['says']!r}"
    page = html_lib.unescape(open(result["feedback"], encoding="utf-8").read())
    assert message.splitlines()[0] in page, f"{wrong['name']}: the feedback page does not show {message!r}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_summary_names_each_graded_cell(graded, assignment):
    import html as html_lib

    from autograde.messages import cell_label
    tests = {c.metadata["nbgrader"]["grade_id"]: cell_label(c.source, c.metadata["nbgrader"]["grade_id"])
             for c in released(assignment).cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert tests
    for name in ("solution", "untouched"):
        page = html_lib.unescape(open(graded(assignment)[name]["feedback"], encoding="utf-8").read())
        summary = page.split('<header class="feedback-summary"', 1)[1].split("</header>", 1)[0]
        for grade_id, label in tests.items():
            assert grade_id in summary and label in summary, f"{name}: the summary does not name {grade_id} ({label})"
        status = ">passed</span>" if name == "solution" else ">failed</span>"
        assert summary.count(status) == len(tests), summary[:2000]
