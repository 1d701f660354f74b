"""The grader rebuilds each submission against the release (autograde/submission.py): the student's own cells must
come back exactly once each, in the student's order, wherever they were added. Before, a cell added at the top or
after a prose cell was copied after every one of chapter 1's prose cells: seven runs of a slow cell, and a draft
kept at the top replaced the real function further down."""
from __future__ import annotations

import nbformat
import pytest

from autograde.submission import rebuild, student_cell_number
from coursekit.sync import chapter_notebooks
from tests.submissions import released, submission

CHAPTERS = [nb.parent.name for nb in chapter_notebooks()]


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _marker(number: int) -> str:
    return f"mine_{number} = {number}   # a cell of the student's own"


def with_cells_everywhere(assignment: str) -> nbformat.NotebookNode:
    """The complete solution with a code cell of the student's own at the top, after every released cell (prose,
    read-only, solution and test cells alike) and at the end, and two in a row after the first solution cell."""
    nb = submission(assignment)
    cells, number = [], 0

    def mine() -> nbformat.NotebookNode:
        nonlocal number
        number += 1
        return nbformat.v4.new_code_cell(_marker(number))

    cells.append(mine())
    first_solution = True
    for cell in nb.cells:
        cells.append(cell)
        cells.append(mine())
        if _nbgrader(cell).get("solution") and first_solution:
            cells.append(mine())
            first_solution = False
    nb.cells = cells
    return nb


def student_code(nb: nbformat.NotebookNode) -> list[str]:
    """The student's code in the order it runs: solution cells and cells of their own (read-only cells, tests
    among them, are the release's in the graded notebook)."""
    return [c.source for c in nb.cells if c.cell_type == "code" and not _nbgrader(c).get("grade")
            and not (_nbgrader(c) and not _nbgrader(c).get("solution"))]


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_every_added_cell_is_graded_once_in_the_students_order(assignment):
    nb = with_cells_everywhere(assignment)
    graded = rebuild(nb, released(assignment), assignment).notebook
    mine = [c.source for c in graded.cells if c.source.startswith("mine_")]
    assert len(mine) == len(set(mine)), "a cell of the student's own was copied"
    assert student_code(graded) == student_code(nb)


def test_the_rebuilt_notebook_is_the_release_with_the_students_cells_in_their_places():
    """Each released cell once, in the release's order; each added cell right after the released cell it followed."""
    assignment = "ch01_qkv_softmax"
    release = released(assignment)
    nb = with_cells_everywhere(assignment)
    graded = rebuild(nb, release, assignment).notebook
    expected = [_marker(1)]
    number = 1
    first_solution = True
    for cell in release.cells:
        expected.append(cell.source if not _nbgrader(cell).get("solution") else "<solution>")
        number += 1
        expected.append(_marker(number))
        if _nbgrader(cell).get("solution") and first_solution:
            number += 1
            expected.append(_marker(number))
            first_solution = False
    got = ["<solution>" if _nbgrader(c).get("solution") else c.source for c in graded.cells]
    assert got == expected


def test_each_graded_cell_knows_its_number_in_the_students_notebook():
    assignment = "ch01_qkv_softmax"
    nb = with_cells_everywhere(assignment)
    graded = rebuild(nb, released(assignment), assignment).notebook
    for cell in graded.cells:
        number = student_cell_number(cell)
        if cell.source.startswith("mine_") or _nbgrader(cell).get("solution"):
            assert number is not None and nb.cells[number - 1].source == cell.source, cell.source[:60]
        else:
            assert number is None, f"a cell of the release is numbered: {cell.source[:60]}"


def test_a_students_own_origin_record_is_replaced():
    assignment = "ch01_qkv_softmax"
    nb = submission(assignment)
    nb.cells.insert(0, nbformat.v4.new_code_cell("x = 1", metadata={"autograde": {"cell": 99}}))
    graded = rebuild(nb, released(assignment), assignment).notebook
    assert [student_cell_number(c) for c in graded.cells if c.source == "x = 1"] == [1]


def test_a_draft_at_the_top_is_run_before_the_real_function():
    """Run top to bottom in the student's kernel, the later definition wins; so it must in the graded notebook."""
    assignment = "ch01_qkv_softmax"
    nb = submission(assignment)
    nb.cells.insert(0, nbformat.v4.new_code_cell("def softmax_np(x, axis=-1):\n    return x"))
    graded = rebuild(nb, released(assignment), assignment).notebook
    sources = [c.source for c in graded.cells]
    draft = sources.index("def softmax_np(x, axis=-1):\n    return x")
    real = next(i for i, c in enumerate(graded.cells) if _nbgrader(c).get("grade_id") == "softmax_np")
    assert sources.count(sources[draft]) == 1 and draft < real
