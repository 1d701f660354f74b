"""The nbgrader steps, each run in a child process under a time limit (run_in_child), or by hand as
python -m autograde.worker ...

    prepare ASSIGNMENT WORKSPACE     record the assignment in the gradebook (a PrepareStep)
    grade   STEP.json                autograde, re-check and feedback for one student (a GradeStep, as JSON)

Each step is one typed object: run_in_child hands it to the child as it is (pickled by multiprocessing), and the
command line reads it from JSON, field by field, never from positional strings.
"""
from __future__ import annotations

import io
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class PrepareStep:
    """Record `assignment` in a gradebook under `workspace`, to be copied for each submission."""
    assignment: str
    workspace: str


@dataclass(frozen=True)
class GradeStep:
    """Autograde, re-check and give feedback to one student's rebuilt notebook, in its private course folder."""
    assignment: str
    course: str                  # the submission's private nbgrader course folder
    student: str
    cell_timeout_s: int
    use_sandbox: bool
    package: str                 # the earlier chapters' attnlab the sandbox may import ("" for none)
    wall_s: int                  # the notebook's whole run may take this long

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "GradeStep":
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            raise SystemExit(f"a grade step is a JSON object with exactly the fields {sorted(names)}")
        wrong = [f.name for f in fields(cls) if type(data[f.name]).__name__ != f.type]   # f.type: "int", "str"...
        if wrong:
            raise SystemExit(f"a grade step's fields {wrong} have the wrong type")
        return cls(**data)


class ChildFailed(RuntimeError):
    """The child process failed or ran out of time; the message is short enough for a results table."""


# Imported once, in the process every child is forked from, instead of once per submission: nbgrader and
# torch alone take about 2.5 s of CPU to import, a third of what grading a chapter-1 submission costs.
# autograde first: its __init__ must run before anything imports nbformat; autograde.warm last (it renders a page).
PRELOAD = ["autograde", "nbgrader.apps", "nbgrader.api", "nbgrader.converters", "nbconvert.exporters", "nbclient", "torch",
           "safetensors.torch", "autograde.config", "autograde.execute", "autograde.feedback", "autograde.recheck",
           "coursekit.release", "autograde.warm"]
_CONTEXT = multiprocessing.get_context("forkserver")
LAUNCHED = "AUTOGRADE_LAUNCHED"      # when the parent asked for the child (time.time()), for `make bench`
_CONTEXT.set_forkserver_preload(PRELOAD)


def _child(step: PrepareStep | GradeStep, log_path: str, launched: float) -> None:
    """In the forked child: a session of its own (so a timeout kills everything it started), output to the log."""
    os.environ[LAUNCHED] = repr(launched)
    os.setsid()
    from coursekit.layout import REPO_ROOT
    os.chdir(REPO_ROOT)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    code = run_step(step)
    sys.__stdout__.flush()
    sys.exit(code)


def run_in_child(step: PrepareStep | GradeStep, timeout: float) -> str:
    """Run `step` in a child process under a wall-clock limit; kill the child's whole session on timeout.

    The child is forked from a server process that has already imported PRELOAD (multiprocessing's
    forkserver): it starts as a fresh process would, without paying for the imports each time.
    """
    with tempfile.NamedTemporaryFile(prefix="autograde-worker-", suffix=".log") as log:
        proc = _CONTEXT.Process(target=_child, args=(step, log.name, time.time()), daemon=False)
        with _STATUS:
            proc.start()
        try:
            # Wait on the child's sentinel, which reads nothing; its exit status is read under _STATUS only.
            done = bool(multiprocessing.connection.wait([proc.sentinel], timeout))
            if not done:
                _kill_session(proc.pid)               # the kernel and anything it started go too
            with _STATUS:
                proc.join()
                exitcode = proc.exitcode
        finally:
            _kill_session(proc.pid)                   # leftovers: processes a submission forked
        if not done:
            raise ChildFailed(f"did not finish within {timeout:g} s") from None
        output = Path(log.name).read_bytes().decode(errors="replace")
    if exitcode != 0:
        last = [line for line in output.strip().splitlines() if line.strip()][-1:] or ["no output"]
        raise ChildFailed(f"exit status {exitcode}: {last[0][:300]}")
    return output


# A forkserver child's exit status is a few bytes on a pipe, and multiprocessing reads it from whichever thread
# polls first: Process.start() polls every other live child. Two grading threads reading at once can leave one
# with end-of-file, that is exit status 255 for a run that succeeded. So starting and reaping take turns.
_STATUS = threading.Lock()


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):     # already gone (the forkserver reaps the child, not us)
        pass


def _api(config):
    import logging

    from nbgrader.apps import NbGraderAPI
    api = NbGraderAPI(config=config)
    api.log.setLevel(logging.WARNING)
    return api


def alembic_head() -> str:
    """The revision nbgrader stamps a new gradebook with: the head of its own database migrations.

    nbgrader asks a new `alembic heads` process for it (nbgrader.api.get_alembic_version), 2.6 s of CPU in every
    grading command, for a name that alembic reads in this process from the same migration scripts in 0.1 s."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import _temp_alembic_ini

    with _temp_alembic_ini("sqlite:///gradebook.db") as ini:
        heads = ScriptDirectory.from_config(Config(ini)).get_heads()
    if len(heads) != 1:
        raise SystemExit(f"nbgrader's gradebook migrations have {len(heads)} heads, not one: {heads}")
    return heads[0]


def prepare(step: PrepareStep) -> None:
    """generate_assignment from solutions/ into a scratch release: it fills the gradebook with the
    assignment's cells (with hidden tests) and checks that the committed exercises/ is what sync writes."""
    import nbgrader.api

    from autograde.config import REPO_ROOT, nbgrader_config
    from coursekit.release import changed_cells, same_release

    assignment, workspace = step.assignment, step.workspace
    nbgrader.api.get_alembic_version = alembic_head     # the new gradebook below is stamped without a subprocess
    scratch = Path(workspace) / "release"
    config = nbgrader_config(Path(workspace), release_root=scratch)
    result = _api(config).generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        raise SystemExit(f"nbgrader could not prepare {assignment}: {result['error'] or result['log']}")
    for fresh in (scratch / "exercises" / assignment).glob("*.ipynb"):
        committed = REPO_ROOT / "exercises" / assignment / fresh.name
        if not committed.is_file():
            raise SystemExit(f"exercises/{assignment}/{fresh.name} is missing: run `make sync` before grading")
        # Opened and saved in Jupyter is fine; changed cells are not (the release rebuilds every submission).
        if not same_release(committed.read_bytes(), fresh.read_bytes()):
            cells = ", ".join(changed_cells(committed.read_bytes(), fresh.read_bytes()))
            raise SystemExit(f"exercises/{assignment}/{fresh.name} differs from what solutions/ generates "
                             f"(cells: {cells}): run `make sync` before grading (it first copies edited "
                             "notebooks into work/, so nobody's answers are lost)")


def grade(step: GradeStep) -> None:
    """Autograde one submission in its private course folder, re-check it out of process, write feedback."""
    import nbformat
    from nbgrader.api import Gradebook

    from autograde.config import grading_config
    from autograde.recheck import in_run_verdicts, recheck

    assignment, course, student, cell_timeout_s = step.assignment, step.course, step.student, step.cell_timeout_s
    sandboxed, package, wall_s = step.use_sandbox, step.package, step.wall_s
    started = {"worker_start": time.time() - float(os.environ.get(LAUNCHED, time.time()))}
    if not sandboxed:
        # The sandbox sets these in the kernel's environment; without it the kernel inherits this process's.
        from autograde.sandbox import GRADING_ENV
        os.environ.update(GRADING_ENV)
    package_dir = Path(package) if package else None
    config = grading_config(Path(course), int(cell_timeout_s), package_dir, sandboxed, int(wall_s))
    with Gradebook(config.CourseDirectory.db_url) as gb:
        gb.update_or_create_student(student)
    api = _api(config)
    clock = time.monotonic()
    result = api.autograde(assignment, student, force=True, create=True)
    phases = {"autograde": time.monotonic() - clock}
    if not result["success"]:
        raise SystemExit(f"nbgrader autograde failed: {_last_error(result)}")

    autograded = Path(course) / "autograded" / student / assignment / f"{assignment}.ipynb"
    with Gradebook(config.CourseDirectory.db_url) as gb:
        notebook = gb.find_submission_notebook(assignment, assignment, student)
        passed = {g.name for g in notebook.grades if (g.auto_score or 0) > 0}
    executed = nbformat.read(autograded, as_version=4)
    unreached = _unreached_tests(executed)
    slow = slow_cells(executed, int(cell_timeout_s))
    clock = time.monotonic()
    verdicts = {}
    if sandboxed:
        # The re-check the sandbox ran right after the notebook, where it can stand in for one in a sandbox of its own.
        verdicts = in_run_verdicts(assignment, executed, Path(course) / "sandbox", passed | unreached)
        phases["recheck_in_run"] = float(verdicts is not None)
        if verdicts is None:
            verdicts = recheck(assignment, executed, Path(course) / "sandbox" / "probe", package_dir,
                               int(cell_timeout_s), passed | unreached)
    phases["recheck"] = time.monotonic() - clock
    flags, rescued = {}, []
    with Gradebook(config.CourseDirectory.db_url) as gb:
        for cell, problem in verdicts.items():
            grade = gb.find_grade(cell, assignment, assignment, student)
            if problem and (grade.auto_score or 0) > 0:
                # Passed in the kernel, failed out of process: the kernel's verdict was not earned.
                grade.manual_score = 0.0
                flags[cell] = problem
            elif not problem and cell in unreached:
                # The notebook's wall clock ran out before this test (a slow cell, a loaded machine): the
                # functions it tests passed out of process, so the lost time does not cost their points.
                grade.manual_score = grade.max_score
                rescued.append(cell)
        gb.db.commit()
    record = _run_flags(Path(course)) if sandboxed else []
    if record:
        # Whatever the scores: a changed kernel can forge a pass in it, and a run whose record was tampered with
        # or cut short cannot vouch for its own; only the tests the re-check confirmed out of process kept points.
        flags[KERNEL] = "; ".join(record)
    (Path(course) / "recheck.json").write_text(json.dumps({"verdicts": verdicts, "flagged": flags,
                                                            "rescued": rescued, "slow": list(slow.values())}))
    if flags or rescued or slow:
        _explain_in_feedback(autograded, flags, rescued, slow)

    clock = time.monotonic()
    result = api.generate_feedback(assignment, student, force=True)
    phases["feedback"] = time.monotonic() - clock
    if not result["success"]:
        raise SystemExit(f"nbgrader generate_feedback failed: {_last_error(result)}")
    _write_timings(Path(course), {**started, **phases})


def _write_timings(course: Path, phases: dict[str, float]) -> None:
    """Seconds per phase of this submission's grading (grading.Result.timings, `make bench`)."""
    import json
    run = {}
    try:
        run = json.loads((course / "sandbox" / "timings.json").read_text())
    except (OSError, ValueError):
        pass
    # nbgrader's own preprocessors: the autograde step less the sandboxed run it contains
    phases["nbgrader"] = phases["autograde"] - run.get("sandbox_run", 0.0)
    (course / "timings.json").write_text(json.dumps({**run, **phases}))


KERNEL = "kernel"      # recheck.json's flag for a change to the kernel itself, beside the test cells' flags


def _run_flags(course: Path) -> list[str]:
    """What the grader concluded from the sandbox runner's private report (execute.run_record): a change to the
    kernel (a custom exception handler, input transformers, event callbacks, a patched run_cell, a trace
    function), a tampered record of the run, or a check after the last cell that never ran."""
    import json

    from autograde.execute import RUN_RECORD
    try:
        return list(json.loads((course / "sandbox" / RUN_RECORD).read_text(encoding="utf-8"))["flags"])
    except FileNotFoundError:
        return []               # no sandboxed run: nbgrader failed before it, and says so


def _unreached_tests(notebook) -> set[str]:
    """The test cells the notebook's run never reached: its wall clock ran out first (SandboxedExecute's NotRun)."""
    from autograde.recheck import NOT_RUN
    return {cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")
            and any(o.get("ename") == NOT_RUN for o in cell.get("outputs", []))}


def slow_cells(notebook, cell_timeout_s: int) -> dict[int, str]:
    """{notebook index: what happened, in the student's words} for each cell the run stopped at the cell limit.

    The errors are the runner's own (sandbox_runner.py); the cell's number is the one it has in the student's own
    notebook (submission.ORIGIN), so that the student can find it."""
    from autograde.sandbox_runner import CELL_STOPPED, CELL_TIMEOUT, TIMED_OUT_AT
    from autograde.submission import student_cell_number
    found = {}
    for index, cell in enumerate(notebook.cells):
        errors = {o.get("ename"): str(o.get("evalue", "")) for o in cell.get("outputs", [])
                  if o.get("output_type") == "error"}
        if cell.cell_type != "code" or not {CELL_TIMEOUT, CELL_STOPPED} & set(errors):
            continue
        test = cell.metadata.get("nbgrader", {}).get("grade_id") if cell.metadata.get("nbgrader", {}).get("grade") \
            else None
        number = student_cell_number(cell)
        name = f"test cell '{test}'" if test else f"cell {number}" if number else "a cell of the release"
        at = TIMED_OUT_AT.search(errors.get(CELL_TIMEOUT, ""))
        if test:
            text = "was stopped; it scored 0, and the cells after it ran normally"
        elif CELL_TIMEOUT in errors and at:
            text = (f"was stopped at line {at.group(1)}; the cells after it ran normally, with what its lines before "
                    f"line {at.group(1)} had defined")
        elif CELL_TIMEOUT in errors:
            text = "was stopped; the cells after it ran normally"
        else:
            text = ("ignored the interrupt, so it was stopped; the notebook was run again without it, and the cells "
                    "after it ran normally")
        found[index] = f"{name} ran past the {cell_timeout_s} s limit and {text}"
    return found


def _explain_in_feedback(autograded: Path, flags: dict[str, str], rescued: list[str] = (),
                         slow: dict[int, str] | None = None) -> None:
    """Put the re-check's verdict under each test cell it overruled or graded, and a note under each cell stopped at
    the cell limit, where the feedback page shows them."""
    import html

    import nbformat
    nb = nbformat.read(autograded, as_version=4)
    slow = slow or {}
    cells = []
    if slow:
        cells.append(nbformat.v4.new_markdown_cell(
            "**Slow cells.** " + " ".join(html.escape(text[0].upper() + text[1:]) + "." for text in slow.values())))
    if KERNEL in flags:
        cells.append(nbformat.v4.new_markdown_cell(
            f"**Flagged for the instructor.** {html.escape(flags[KERNEL])}. Such a change can make a failed test "
            "look passed inside the notebook, so only the tests confirmed outside the notebook kept their points."))
    for index, cell in enumerate(nb.cells):
        cells.append(cell)
        if index in slow:
            cells.append(nbformat.v4.new_markdown_cell(f"**Stopped at the time limit.** {html.escape(slow[index])}."))
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in flags:
            cells.append(nbformat.v4.new_markdown_cell(
                f"**Scored 0 by the re-check.** This cell's tests passed inside the notebook, but the same functions, "
                f"run again outside the notebook on new inputs, failed ({html.escape(flags[gid])}). "
                "Your functions must work as "
                "plain Python, as they do in your own package after `make export`. Flagged for the instructor."))
        if gid in rescued:
            cells.append(nbformat.v4.new_markdown_cell(
                "**Graded outside the notebook.** The notebook's run gave this cell no result the grader could use: "
                "it ran past its time limit for a whole submission before it reached this cell (a slow cell, or a "
                "busy grading machine), or it was stopped (see the note on top). The functions this cell tests "
                "were run outside the notebook instead, on new inputs, and passed: full points."))
    nb.cells = cells
    nbformat.write(nb, autograded)


def _last_error(result: dict) -> str:
    text = (result.get("error") or "") + "\n" + (result.get("log") or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


def run_step(step: PrepareStep | GradeStep) -> int:
    """Run one step with its output kept back: printed (with why) only if the step fails. Exit status."""
    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink):
        try:
            prepare(step) if isinstance(step, PrepareStep) else grade(step)
        except SystemExit as exc:
            print(sink.getvalue(), file=sys.__stdout__)
            print(exc, file=sys.__stdout__)
            return 1
    return 0


def main(argv: list[str]) -> int:
    """The command line: `prepare ASSIGNMENT WORKSPACE`, or `grade STEP.json`."""
    if len(argv) == 3 and argv[0] == "prepare":
        return run_step(PrepareStep(argv[1], argv[2]))
    if len(argv) == 2 and argv[0] == "grade":
        return run_step(GradeStep.from_json(Path(argv[1]).read_text(encoding="utf-8")))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
