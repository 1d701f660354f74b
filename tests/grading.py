"""Run the real grading CLI on a batch of notebooks and return its JSON results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

from tests.cheats import cheat_submissions
from tests.submissions import REPO, known_wrong, released, submission, write

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


def chapter_submissions(assignment: str) -> dict[str, nbformat.NotebookNode]:
    """{student id: notebook}: the solution, the untouched release, each known-wrong implementation
    (wrong_NAME) and each cheat (cheats.py), all graded together by the `graded` fixture."""
    notebooks = {"solution": submission(assignment), "untouched": released(assignment)}
    notebooks |= {f"wrong_{w['name']}": submission(assignment, {w["cell"]: w["code"]}) for w in known_wrong(assignment)}
    return notebooks | cheat_submissions(assignment)


def grade_chapter(assignment: str, folder: Path) -> dict[str, dict]:
    """chapter_submissions graded in one CLI call: {student id: result}."""
    files = [write(nb, folder / "submissions" / f"{name}.ipynb") for name, nb in chapter_submissions(assignment).items()]
    return grade_files(assignment, files, folder / "workspace")


def cells(result: dict) -> dict[str, dict]:
    return {c["cell"]: c for c in result["cells"]}
