"""Forged passes in every chapter, graded with the real CLI: a cheat that makes the notebook's own tests pass
(an IPython input transformer that blanks later cells, patched comparison functions, swallowed exceptions)
earns nothing on the cells it forges, and is flagged, because the out-of-process re-check calls the
student's functions itself. The honest solution keeps full marks in the same run (the cases are in
cheats.py; the `graded` fixture in conftest.py grades them with each chapter's other submissions).
Chapter 1 also has a larger hostile suite of its own (test_hostile.py)."""
from __future__ import annotations

import pytest

from tests.cheats import HIDDEN_BEHIND_PATCHES, patched_wrong
from coursekit.sync import chapter_notebooks
from tests.grading import cells

ASSIGNMENTS = [nb.parent.name for nb in chapter_notebooks()]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_honest_solution_keeps_full_marks(graded, assignment):
    result = graded(assignment)["solution"]
    assert result["score"] == result["max_score"] and not result["flagged"], result


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("case", ["input_transformer", "swallow_exceptions"])
def test_a_cheat_over_unwritten_exercises_earns_nothing_and_is_flagged(graded, assignment, case):
    result = graded(assignment)[case]
    assert result["score"] == 0, result
    assert result["flagged"], f"{case} in {assignment} must be flagged: {result}"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", list(HIDDEN_BEHIND_PATCHES))
def test_patched_comparisons_earn_nothing_on_the_forged_cells(graded, assignment):
    results, wrong = graded(assignment), patched_wrong(assignment)
    result = cells(results["patch_comparisons"])
    for name, cell in result.items():
        if name in wrong["loses"]:
            assert cell["score"] == 0, f"{name} forged by patched comparisons kept {cell['score']}"
        else:
            assert cell["score"] == cell["max_score"] and not cell["flagged"], (name, cell)
    assert results["patch_comparisons"]["flagged"], "patching the comparisons must be flagged"
