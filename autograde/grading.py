"""Grade one submission: check the file, rebuild it against the release, grade it in a private course folder.

Each submission gets its own nbgrader course folder (a copy of the prepared gradebook, its own
autograded/ and feedback/), so submissions can be graded in parallel and none can see another's files.
nbgrader itself runs in a child process (autograde.worker) under a wall-clock limit, and the student's
code runs inside the sandbox (autograde/sandbox.py).
"""
from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from autograde.config import CELL_TIMEOUT_S, DEFAULT_WORKSPACE, REPO_ROOT
from autograde.messages import safe_failure_message
from autograde.submission import SubmissionError, read_submission, rebuild, recheck_steps

# The notebook's run may take this many cell timeouts in all (plus start-up): a few slow cells are graded,
# and nothing holds a worker for one timeout per cell. The re-check has its own, similar budget (recheck.py).
NOTEBOOK_TIMEOUTS = 4
START_UP_S = 120


def submission_timeout(cell_timeout_s: int) -> int:
    """Seconds the notebook's whole run may take, by default."""
    return NOTEBOOK_TIMEOUTS * cell_timeout_s + START_UP_S


def grading_budget(cell_timeout_s: int, submission_timeout_s: int, steps: int) -> int:
    """Seconds the grading child may take in all, for a notebook whose re-check has at most `steps` steps: the
    notebook, the re-check its sandbox runs after it, every re-check run in a sandbox of its own (where that one
    could not be used), the feedback. A safety net only: each part keeps limits of its own."""
    from autograde.execute import in_run_budget_s
    from autograde.recheck import MAX_RUNS, recheck_wall_s
    return int(submission_timeout_s + in_run_budget_s(cell_timeout_s, steps)
               + MAX_RUNS * recheck_wall_s(cell_timeout_s, steps) + START_UP_S)


@dataclass
class CellResult:
    cell: str
    score: float
    max_score: float
    error: str = ""          # the first error the test cell raised, as the feedback states it (messages.py)
    flagged: str = ""        # why the out-of-process re-check overruled the kernel, if it did


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
    sha256: str = ""         # of the submitted file: a rerun skips unchanged submissions
    flagged: bool = False    # suspected tampering: some cell passed in the kernel but failed its re-check
    sandboxed: bool = True
    graded_with: str = ""    # digest of what else decides the grade (release, tests, limits): see grading_settings
    timings: dict = field(default_factory=dict)   # seconds per grading phase (make bench), not part of the grade
    slow_cells: list[str] = field(default_factory=list)   # the cells stopped at the cell limit, as the notes say

    def line(self) -> str:
        text = f"{self.student}: {self.score:g} / {self.max_score:g}"
        if self.flagged:
            text += "  [FLAGGED: suspected tampering]"
        return text + (f"  ({self.error})" if self.error else "")

    def time_line(self) -> str:
        """Where this submission's grading time went: the notebook's run in the sandbox, and the re-check (the part
        run in the same sandbox after the notebook, and any run in a sandbox of its own)."""
        if "sandbox_run" not in self.timings:
            return ""
        recheck = self.timings.get("recheck_in_sandbox", 0.0)
        notebook = self.timings["sandbox_run"] - recheck
        return f"notebook {notebook:.1f} s, re-check {recheck + self.timings.get('recheck', 0.0):.1f} s"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        data = dict(data)
        data["cells"] = [CellResult(**c) for c in data.get("cells", [])]
        return cls(**data)


class UsageError(ValueError):
    """The command line names something that does not exist (an assignment, a file)."""


def student_id_for(path: Path, taken: set[str]) -> str:
    """A gradebook-safe student id from a file name, unique among `taken`."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem).strip("._-") or "student"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    taken.add(candidate)
    return candidate


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
        self.prepared = self.workspace / ".work" / "prepared" / assignment
        self.package = self.workspace / ".work" / "lib" / assignment
        self._settings: dict[tuple, str] = {}

    # where things live
    def submitted(self, student: str) -> Path:
        return self.workspace / "submitted" / student / self.assignment / self.notebook_name

    def private(self, student: str) -> Path:
        return self.workspace / ".work" / "runs" / self.assignment / student

    def feedback(self, student: str) -> Path:
        return self.workspace / "feedback" / student / self.assignment / (Path(self.notebook_name).stem + ".html")

    def result_file(self, student: str) -> Path:
        return self.workspace / "results" / self.assignment / f"{student}.json"

    def prepare(self) -> None:
        """Record the assignment in a gradebook to copy for each submission, and collect the reference
        modules of the earlier chapters, the only part of attnlab the sandbox may import."""
        from autograde.worker import PrepareStep, run_in_child
        run_in_child(PrepareStep(self.assignment, str(self.prepared)), timeout=600)
        self._earlier_chapters_package()
        self._settings.clear()

    def _earlier_chapters_package(self) -> None:
        """attnlab assembled from the export cells of the chapters before this one (not whole modules: a
        module may grow over several chapters, and this chapter's part of it is the answer), and the
        release's other files."""
        from autograde.config import ASSIGNMENT_FILES
        from coursekit.sync import chapter_number, reference_package_before
        shutil.rmtree(self.package, ignore_errors=True)
        for rel, text in reference_package_before(chapter_number(self.assignment), self.repo,
                                                  command="python -m autograde").items():
            (self.package / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.package / rel).write_text(text, encoding="utf-8")
        (self.package / ASSIGNMENT_FILES).mkdir()
        for data in sorted((self.repo / "exercises" / self.assignment).iterdir()):
            if data.is_file() and data.suffix != ".ipynb":
                shutil.copyfile(data, self.package / ASSIGNMENT_FILES / data.name)

    def max_score(self) -> float:
        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{self.prepared / 'gradebook.db'}") as gb:
            return float(gb.find_assignment(self.assignment).max_score)

    def grading_settings(self, cell_timeout_s: int, submission_timeout_s: int, use_sandbox: bool) -> str:
        """A digest of everything besides the submission that decides its grade: the release and its hidden
        tests, the earlier chapters' reference code, and the limits. A rerun regrades when any of them changed
        (an instructor who fixes a test, or gives slow cells more time, expects every grade to follow)."""
        key = (cell_timeout_s, submission_timeout_s, use_sandbox)
        if key not in self._settings:
            self._settings[key] = self._digest_settings(*key)
        return self._settings[key]

    def _digest_settings(self, cell_timeout_s: int, submission_timeout_s: int, use_sandbox: bool) -> str:
        digest = hashlib.sha256(f"{cell_timeout_s} {submission_timeout_s} {use_sandbox}".encode())
        source = self.repo / "solutions" / self.assignment / self.notebook_name
        files = [(f"repo/{p.relative_to(self.repo)}", p) for p in (self.release, source) if p.is_file()]
        files += [(f"lib/{p.relative_to(self.package)}", p) for p in sorted(self.package.rglob("*")) if p.is_file()]
        for name, path in files:
            digest.update(name.encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()

    def load_result(self, student: str) -> Result | None:
        path = self.result_file(student)
        return Result.from_dict(json.loads(path.read_text())) if path.is_file() else None

    def save_result(self, result: Result) -> None:
        path = self.result_file(result.student)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.as_dict(), indent=1))


GRADING_FAILED = "grading failed: "


def reusable(previous: Result, digest: str, settings: str, has_feedback: bool) -> bool:
    """Whether a stored result stands for a rerun: the same bytes graded the same way, with its feedback page.
    A grading that failed (a worker killed from outside, a machine out of memory) is tried again: the next
    attempt may succeed, and a failure is never kept as a grade."""
    if previous.sha256 != digest or previous.graded_with != settings:
        return False
    if previous.error.startswith(GRADING_FAILED):
        return False
    return bool(previous.error) or has_feedback


def grade(course: Course, student: str, file: Path, cell_timeout_s: int = CELL_TIMEOUT_S,
          submission_timeout_s: int | None = None, use_sandbox: bool = True,
          only_if_changed: bool = False) -> Result:
    """Grade `file` as `student`'s submission of course.assignment; never raises for a bad submission.
    With only_if_changed, a submission whose bytes were already graded keeps its stored result."""
    if submission_timeout_s is None:
        submission_timeout_s = submission_timeout(cell_timeout_s)
    raw = Path(file).read_bytes() if Path(file).is_file() else b""
    digest = hashlib.sha256(raw).hexdigest()
    settings = course.grading_settings(cell_timeout_s, submission_timeout_s, use_sandbox)
    if only_if_changed:
        previous = course.load_result(student)
        if previous is not None and reusable(previous, digest, settings, course.feedback(student).is_file()):
            return previous
    submitted = course.submitted(student)
    if Path(file).resolve() != submitted.resolve():
        submitted.parent.mkdir(parents=True, exist_ok=True)
        submitted.write_bytes(raw)
    shutil.rmtree(course.feedback(student).parent, ignore_errors=True)

    max_score = course.max_score()
    try:
        notebook = read_submission(submitted)
        rebuilt = rebuild(notebook, nbformat.read(course.release, as_version=4), course.assignment)
    except SubmissionError as exc:
        return _finish(course, ungradable(course, student, max_score, f"not graded: {exc}"), digest, use_sandbox,
                       settings)

    if rebuilt.notes:
        notes = "\n".join(f"- {n}" for n in rebuilt.notes)
        rebuilt.notebook.cells.insert(0, nbformat.v4.new_markdown_cell(f"**Grading notes**\n\n{notes}"))
    private = course.private(student)
    shutil.rmtree(private, ignore_errors=True)
    normalized = private / ".work" / "normalized" / student / course.assignment / course.notebook_name
    normalized.parent.mkdir(parents=True)
    shutil.copyfile(course.prepared / "gradebook.db", private / "gradebook.db")
    nbformat.write(rebuilt.notebook, normalized)

    from autograde.worker import ChildFailed, GradeStep, run_in_child
    step = GradeStep(course.assignment, str(private), student, cell_timeout_s, use_sandbox, str(course.package),
                     submission_timeout_s)
    try:
        run_in_child(step, timeout=grading_budget(cell_timeout_s, submission_timeout_s,
                                                  recheck_steps(rebuilt.notebook)))
    except ChildFailed as exc:
        result = ungradable(course, student, max_score, f"{GRADING_FAILED}{exc}", rebuilt.notes)
        return _finish(course, result, digest, use_sandbox, settings)
    return _finish(course, _read_result(course, student, rebuilt.notes), digest, use_sandbox, settings)


def _finish(course: Course, result: Result, digest: str, use_sandbox: bool, settings: str) -> Result:
    result.sha256, result.sandboxed, result.graded_with = digest, use_sandbox, settings
    course.save_result(result)
    return result


def _read_result(course: Course, student: str, notes: list[str]) -> Result:
    from nbgrader.api import Gradebook

    private = course.private(student)
    errors = {}
    autograded = private / "autograded" / student / course.assignment / course.notebook_name
    for cell in nbformat.read(autograded, as_version=4).cells:
        if not cell.metadata.get("nbgrader", {}).get("grade"):
            continue            # only test cells are graded; a student cell's error is its own business
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and gid not in errors:
                # the same message the student's feedback shows
                errors[gid] = safe_failure_message(cell.source, output)
    recheck = json.loads((private / "recheck.json").read_text())
    slow = [str(text) for text in recheck.get("slow", [])]
    notes = [*notes, *slow]
    flagged = recheck.get("flagged", {})
    if "kernel" in flagged:
        notes = [*notes, f"flagged: {flagged['kernel']}"]
    for gid in recheck.get("rescued", []):
        errors.pop(gid, None)           # its NotRun error no longer stands
        notes = [*notes, f"the notebook's run gave test cell '{gid}' no usable result (it ran past its time limit "
                         "first, or was stopped); the re-check graded it outside the notebook, and it passed"]
    with Gradebook(f"sqlite:///{private / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(Path(course.notebook_name).stem, course.assignment, student)
        cells = [CellResult(g.name, float(g.score), float(g.max_score), errors.get(g.name, ""), flagged.get(g.name, ""))
                 for g in nb.grades]
        result = Result(student, course.assignment, float(nb.score), float(nb.max_score), cells, list(notes),
                        flagged=bool(flagged), slow_cells=slow)
    order = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(course.release, as_version=4).cells]
    result.cells.sort(key=lambda c: order.index(c.cell) if c.cell in order else len(order))
    try:
        result.timings = {k: round(float(v), 3) for k, v in json.loads((private / "timings.json").read_text()).items()}
    except (OSError, ValueError, TypeError):
        result.timings = {}
    produced = private / "feedback" / student / course.assignment / (Path(course.notebook_name).stem + ".html")
    if produced.is_file():
        course.feedback(student).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(produced, course.feedback(student))
        result.feedback = str(course.feedback(student))
    return result


def ungradable(course: Course, student: str, max_score: float, message: str, notes=()) -> Result:
    """A zero with the reason, and a feedback page that says it."""
    feedback = course.feedback(student)
    feedback.parent.mkdir(parents=True, exist_ok=True)
    feedback.write_text(
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>Feedback: "
        f"{html.escape(course.assignment)}</title></head><body>\n<h1>{html.escape(course.assignment)}</h1>\n"
        f"<p>Score: 0 / {max_score:g}</p>\n<p>{html.escape(message)}</p>\n</body></html>\n", encoding="utf-8")
    return Result(student, course.assignment, 0.0, max_score, [], list(notes), message, str(feedback))
