"""The grading child's time budget (autograde/grading.py, grading_budget) must outlast everything grading one
submission may legitimately take, or a slow but honest submission is killed with its grade lost: the sandbox's
whole-notebook limit, the extra time its runner gets after the last cell for the re-check it runs there
(execute.in_run_budget_s), every re-check in a sandbox of its own at its longest (recheck.recheck_wall_s), and
the start-up and feedback."""
from __future__ import annotations

import pytest

from autograde.execute import in_run_budget_s
from autograde.grading import START_UP_S, grading_budget, submission_timeout
from autograde.recheck import MAX_NOTEBOOK_TIMEOUTS, MAX_RUNS, recheck_wall_s


@pytest.mark.parametrize("cell_timeout_s", [10, 20, 60, 300])
def test_the_budget_outlasts_the_longest_legitimate_grading(cell_timeout_s):
    wall_s = submission_timeout(cell_timeout_s)
    sandbox_s = wall_s + in_run_budget_s(cell_timeout_s)          # sandbox.run extends its deadline once, after `done`
    # The notebook's time, as the fallback re-check reads it, counts the in-run re-check too: at most its cap.
    longest_recheck_s = recheck_wall_s(cell_timeout_s, sandbox_s)
    assert longest_recheck_s == recheck_wall_s(cell_timeout_s, MAX_NOTEBOOK_TIMEOUTS * cell_timeout_s)
    assert grading_budget(cell_timeout_s, wall_s) >= sandbox_s + MAX_RUNS * longest_recheck_s + START_UP_S
