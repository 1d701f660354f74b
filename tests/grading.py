"""Run the real grading CLI on a batch of notebooks and return its JSON results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from submissions import REPO

CELL_TIMEOUT_S = 20


def grade_files(assignment: str, files: list[Path], workspace: Path) -> dict[str, dict]:
    """{student id: result} from `python -m autograde grade ASSIGNMENT FILES --json`."""
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", assignment, *map(str, files), "--json", "--workers", "2",
                          "--workspace", str(workspace), "--cell-timeout", str(CELL_TIMEOUT_S)],
                         cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["student"]: r for r in json.loads(run.stdout)}
    assert len(results) == len(files), "every file gets exactly one result"
    return results


def cells(result: dict) -> dict[str, dict]:
    return {c["cell"]: c for c in result["cells"]}
