"""Time limits of grading one submission.

A re-check run (autograde/recheck.py) holds each of its steps (a student's cell, a probe) to the cell limit, and its
watchdog stops a step that ignores that limit GRACE_S later. So its wall clock, recheck_wall_s, must hold every step
at its longest: then it cannot run out as a whole, whatever the machine's load, and only a step that is itself too
slow loses anything. Before, it was sized from the notebook's time, and a slow cell that ran out the notebook's clock
ran out the re-check's too: every test scored 0.

The grading child's budget (autograde/grading.py, grading_budget) must outlast everything grading one submission
may legitimately take, or a slow but honest submission is killed with its grade lost: the sandbox's whole-notebook
limit, the extra time its runner gets after the last cell for the re-check it runs there (execute.in_run_budget_s),
every re-check in a sandbox of its own at its longest, and the start-up and feedback."""
from __future__ import annotations

import pytest

from autograde.execute import in_run_budget_s
from autograde.grading import START_UP_S, grading_budget, submission_timeout
from autograde.recheck import BASE_WALL_S, MAX_RUNS, recheck_wall_s
from autograde.sandbox_runner import GRACE_S


@pytest.mark.parametrize("cell_timeout_s", [10, 20, 60, 300])
@pytest.mark.parametrize("steps", [1, 14, 60])
def test_a_recheck_that_keeps_its_step_limits_never_runs_out(cell_timeout_s, steps):
    assert recheck_wall_s(cell_timeout_s, steps) >= BASE_WALL_S + steps * (cell_timeout_s + GRACE_S)
    assert in_run_budget_s(cell_timeout_s, steps) >= recheck_wall_s(cell_timeout_s, steps)


@pytest.mark.parametrize("cell_timeout_s", [10, 20, 60, 300])
@pytest.mark.parametrize("steps", [1, 14, 60])
def test_the_budget_outlasts_the_longest_legitimate_grading(cell_timeout_s, steps):
    wall_s = submission_timeout(cell_timeout_s)
    sandbox_s = wall_s + in_run_budget_s(cell_timeout_s, steps)    # sandbox.run extends its deadline once, after `done`
    longest = sandbox_s + MAX_RUNS * recheck_wall_s(cell_timeout_s, steps) + START_UP_S
    assert grading_budget(cell_timeout_s, wall_s, steps) >= longest
