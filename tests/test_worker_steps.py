"""The grading child's job (autograde.worker.GradeStep) is one typed object: handed to the child as it is, and read
from JSON by the command line with every field named and typed, never from positional strings."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from autograde.worker import GradeStep
from tests.submissions import REPO

STEP = GradeStep("ch01_qkv_softmax", "/tmp/course", "ada", 60, True, "/tmp/lib", 360)


def test_a_grade_step_survives_json_and_refuses_a_missing_or_mistyped_field():
    assert GradeStep.from_json(STEP.to_json()) == STEP
    fields = {**dataclasses.asdict(STEP)}
    for broken, why in [({k: v for k, v in fields.items() if k != "wall_s"}, "exactly the fields"),
                        ({**fields, "wall_s": "360"}, "'wall_s'"),           # a number given as a string
                        ({**fields, "use_sandbox": 1}, "'use_sandbox'"),     # an int is not a bool
                        ({**fields, "extra": 1}, "exactly the fields")]:
        with pytest.raises(SystemExit, match=why):
            GradeStep.from_json(json.dumps(broken))


def test_the_worker_command_line_names_its_forms(tmp_path):
    bad = tmp_path / "step.json"
    bad.write_text('{"assignment": "ch01_qkv_softmax"}')
    run = subprocess.run([sys.executable, "-m", "autograde.worker", "grade", str(bad)], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode != 0 and "exactly the fields" in run.stdout + run.stderr
    usage = subprocess.run([sys.executable, "-m", "autograde.worker", "grade", "ch01", "x", "y"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "grade   STEP.json" in usage.stderr
