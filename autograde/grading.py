"""Grade one submission: check the file, rebuild it against the release, run nbgrader, read the scores.

nbgrader runs in a child process (autograde.worker) under a wall-clock limit, so a submission
that hangs its kernel in a way nbgrader's per-cell timeout cannot stop still lets the rest of the
class be graded.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from autograde.config import CELL_TIMEOUT_S, DEFAULT_WORKSPACE, REPO_ROOT
from autograde.submission import SubmissionError, read_submission, rebuild

SUBMISSION_TIMEOUT_S = 900


@dataclass
class CellResult:
    cell: str
    score: float
    max_score: float
    error: str = ""          # the first error the test cell raised, "ename: evalue"


@dataclass
class Result:
    student: str
    assignment: str
    score: float
    max_score: float
    cells: list[CellResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""          # why the submission could not be graded at all
    feedback: str = ""       # path of the feedback HTML

    def line(self) -> str:
        text = f"{self.student}: {self.score:g} / {self.max_score:g}"
        return text + (f"  ({self.error})" if self.error else "")

    def as_dict(self) -> dict:
        return asdict(self)


def student_id_for(path: Path, taken: set[str]) -> str:
    """A gradebook-safe student id from a file name, unique among `taken`."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem).strip("._-") or "student"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    taken.add(candidate)
    return candidate


class UsageError(ValueError):
    """The command line names something that does not exist (an assignment, a file)."""


class Course:
    """One assignment's folders: the release students got, and the grading workspace."""

    def __init__(self, assignment: str, workspace: Path = DEFAULT_WORKSPACE, repo: Path = REPO_ROOT):
        self.assignment = assignment
        self.workspace = Path(workspace).resolve()
        self.repo = Path(repo).resolve()
        self.release = self.repo / "exercises" / assignment / f"{assignment}.ipynb"
        if not self.release.is_file():
            known = sorted(p.name for p in (self.repo / "exercises").glob("ch*") if p.is_dir())
            raise UsageError(f"unknown assignment '{assignment}': no {self.release.relative_to(self.repo)} "
                             f"(known: {', '.join(known) or 'none'})")
        self.notebook_name = self.release.name

    def path(self, kind: str, student: str, suffix: str = ".ipynb") -> Path:
        folder = {"submitted": "submitted", "normalized": ".work/normalized", "autograded": "autograded",
                  "feedback": "feedback"}[kind]
        return self.workspace / folder / student / self.assignment / (Path(self.notebook_name).stem + suffix)

    def prepare(self) -> None:
        """Record the assignment in the gradebook (nbgrader's generate_assignment into a scratch release)."""
        from autograde.worker import run_in_child
        run_in_child(["prepare", self.assignment, str(self.workspace)], timeout=600)

    def max_score(self) -> float:
        from nbgrader.api import Gradebook
        from autograde.config import nbgrader_config
        with Gradebook(nbgrader_config(self.workspace).CourseDirectory.db_url) as gb:
            return float(gb.find_assignment(self.assignment).max_score)


def grade(course: Course, student: str, file: Path, cell_timeout_s: int = CELL_TIMEOUT_S,
          submission_timeout_s: int = SUBMISSION_TIMEOUT_S) -> Result:
    """Grade `file` as `student`'s submission of course.assignment; never raises for a bad submission."""
    submitted = course.path("submitted", student)
    if Path(file).resolve() != submitted.resolve():
        submitted.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, submitted)
    for kind in ("normalized", "autograded", "feedback"):
        shutil.rmtree(course.path(kind, student).parent, ignore_errors=True)

    max_score = course.max_score()
    try:
        notebook = read_submission(submitted)
        rebuilt = rebuild(notebook, nbformat.read(course.release, as_version=4), course.assignment)
    except SubmissionError as exc:
        return _ungradable(course, student, max_score, f"not graded: {exc}")

    if rebuilt.notes:
        notes = "\n".join(f"- {n}" for n in rebuilt.notes)
        rebuilt.notebook.cells.insert(0, nbformat.v4.new_markdown_cell(f"**Grading notes**\n\n{notes}"))
    normalized = course.path("normalized", student)
    normalized.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(rebuilt.notebook, normalized)

    from autograde.worker import ChildFailed, run_in_child
    try:
        run_in_child(["grade", course.assignment, str(course.workspace), student, str(cell_timeout_s)],
                     timeout=submission_timeout_s)
    except ChildFailed as exc:
        return _ungradable(course, student, max_score, f"grading failed: {exc}", rebuilt.notes)
    return _read_result(course, student, rebuilt.notes)


def _read_result(course: Course, student: str, notes: list[str]) -> Result:
    from nbgrader.api import Gradebook
    from autograde.config import nbgrader_config

    errors = {}
    autograded = course.path("autograded", student)
    for cell in nbformat.read(autograded, as_version=4).cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and gid not in errors:
                evalue = str(output.get("evalue", "")).strip().splitlines()
                errors[gid] = f"{output.get('ename', 'Error')}: {evalue[0] if evalue else ''}".strip()
    with Gradebook(nbgrader_config(course.workspace).CourseDirectory.db_url) as gb:
        nb = gb.find_submission_notebook(Path(course.notebook_name).stem, course.assignment, student)
        cells = [CellResult(g.name, float(g.score), float(g.max_score), errors.get(g.name, ""))
                 for g in sorted(nb.grades, key=lambda g: g.cell.id if g.cell else 0)]
        result = Result(student, course.assignment, float(nb.score), float(nb.max_score), cells, list(notes))
    order = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(course.release, as_version=4).cells]
    result.cells.sort(key=lambda c: order.index(c.cell) if c.cell in order else len(order))
    feedback = course.path("feedback", student, ".html")
    result.feedback = str(feedback) if feedback.is_file() else ""
    return result


def _ungradable(course: Course, student: str, max_score: float, message: str, notes=()) -> Result:
    """A zero with the reason, and a feedback page that says it."""
    feedback = course.path("feedback", student, ".html")
    feedback.parent.mkdir(parents=True, exist_ok=True)
    feedback.write_text(
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>Feedback: "
        f"{html.escape(course.assignment)}</title></head><body>\n<h1>{html.escape(course.assignment)}</h1>\n"
        f"<p>Score: 0 / {max_score:g}</p>\n<p>{html.escape(message)}</p>\n</body></html>\n", encoding="utf-8")
    return Result(student, course.assignment, 0.0, max_score, [], list(notes), message, str(feedback))
