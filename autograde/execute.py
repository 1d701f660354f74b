"""nbgrader's Execute preprocessor, made to survive a submission that kills its kernel.

Stock nbgrader aborts the whole submission when the kernel dies (os._exit, a segfault, the kernel
killing itself), so every point is lost, including those earned before. Here the cell that was
running is replaced by an error and the notebook is run again from the top, so the other cells
earn what they earn.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass

from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Integer, Unicode
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

KERNEL_DIED = "KernelDied"


def _died_output(index: int) -> NotebookNode:
    message = (f"the kernel died while this cell ran (cell {index}), for example by os._exit(), "
               "killing its own process or running out of memory; the cell was skipped when grading")
    return NotebookNode(output_type="error", ename=KERNEL_DIED, evalue=message,
                        traceback=[f"{KERNEL_DIED}: {message}"])


class SurvivingExecute(Execute):
    """Execute every cell; when the kernel dies in cell i, rerun with cell i replaced by an error."""

    def preprocess_cell(self, cell, resources, index):
        self._running_index = index
        return super().preprocess_cell(cell, resources, index)

    def preprocess(self, nb, resources, km=None):
        killers: list[int] = []
        while True:
            trial = copy.deepcopy(nb)
            for index in killers:
                trial.cells[index].source = f"raise RuntimeError({_died_output(index).evalue!r})"
            self._running_index = None
            try:
                trial, resources = super().preprocess(trial, resources, km)
            except DeadKernelError:
                index = self._running_index
                if index is None or index in killers or len(killers) >= len(nb.cells):
                    raise
                killers.append(index)
                continue
            for index in killers:
                # Grade what the student wrote, shown with the reason it earned nothing.
                trial.cells[index].source = nb.cells[index].source
                trial.cells[index].outputs = [_died_output(index)]
            return trial, resources


class StderrIsNotFailure(Preprocessor):
    """Keep a test cell's points when something it calls writes to stderr.

    nbgrader scores a grade cell 0 when it has any stderr output, so a library warning (a
    DeprecationWarning from the student's code, say) would cost points that the checks gave. The
    text stays visible, as stdout marked [stderr].
    """

    enabled = Bool(True)   # nbconvert preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
                    output["text"] = "".join(f"[stderr] {line}" for line in output["text"].splitlines(True))
        return cell, resources


class SandboxedExecute(Execute):
    """Execute the notebook inside the sandbox (autograde/sandbox.py) instead of in a local kernel.

    Only the outputs come back: the cells' sources and metadata stay those of the notebook given here,
    so nothing the submission does while running can change which code or which tests are graded.
    """

    package = Unicode("", help="folder holding the reference modules the sandbox may import").tag(config=True)
    scratch = Unicode("", help="private folder for the sandbox's work directory").tag(config=True)
    wall_s = Integer(900, help="seconds the whole notebook may run").tag(config=True)
    files = Unicode("", help="folder of the release's other files, copied next to the notebook").tag(config=True)
    max_notebook_bytes = Integer(64 * 2**20).tag(config=True)

    def preprocess(self, nb, resources, km=None):
        import json
        import shutil
        import time
        from pathlib import Path

        import nbformat

        from autograde import sandbox
        from autograde.untrusted import UntrustedFileError, read_bytes

        work = Path(self.scratch) / "execute"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        nbformat.write(nb, work / "in.ipynb")
        if self.files and Path(self.files).is_dir():
            for data in sorted(Path(self.files).iterdir()):
                if data.is_file():
                    shutil.copyfile(data, work / data.name)
        from autograde.recheck import IN_RUN_RECHECK, in_run_spec, recheck_steps
        steps = recheck_steps(nb)
        spec = in_run_spec(resources.get("nbgrader", {}).get("assignment", ""), work.parent, self.timeout, steps)
        started = time.time()
        run = sandbox.python(work, Path(self.package) if self.package else None, "execute", "in.ipynb",
                             "out.ipynb", str(self.timeout), limits=sandbox.Limits(wall_s=self.wall_s), reported=True,
                             private_input=spec, after_done_s=0 if spec is None else in_run_budget_s(self.timeout, steps))
        _record_timings(work, started, time.time(), nb)
        try:
            data = read_bytes(work / "out.ipynb", self.max_notebook_bytes)
        except (UntrustedFileError, OSError) as exc:
            data, problem = None, str(exc)
        record = run_record(run.report, data, run.timed_out)
        (work.parent / RUN_RECORD).write_text(json.dumps({"flags": record.flags}))
        # The re-check the runner ran after the last cell, for autograde.recheck to use where it can be trusted.
        in_run = next((entry["probe"] for entry in reversed(run.report) if isinstance(entry.get("probe"), dict)), None)
        (work.parent / IN_RUN_RECHECK).write_text(json.dumps({
            "probe": in_run, "usable": bool(in_run) and not run.timed_out and not run.cut_after_done
            and not record.distrusted}))
        executed = None
        if data is not None:
            try:
                executed = nbformat.reads(data.decode("utf-8"), as_version=4)
                if [c.get("id") for c in executed.cells] != [c.get("id") for c in nb.cells]:
                    raise UntrustedFileError("the notebook's cells were changed while it ran")
                problem = ""
            except (UntrustedFileError, UnicodeDecodeError, json.JSONDecodeError, nbformat.reader.NotJSONError,
                    ValueError) as exc:
                executed, problem = None, str(exc)
        if run.timed_out:
            problem = f"the notebook did not finish within {self.wall_s} s"
        if record.distrusted:
            # What the notebook's run shows cannot be told from what a process it left behind wrote: no cell's
            # outputs count, and the re-check grades every test cell out of process (worker.py).
            executed, problem = nbformat.from_dict({"cells": [{} for _ in nb.cells]}), record.distrusted
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if executed is None:
                cell.outputs = [NotebookNode(output_type="error", ename="GradingError",
                                             evalue=f"not graded: {problem}", traceback=[f"GradingError: {problem}"])]
            elif executed.cells[index].get("execution_count") is None and cell.source.strip():
                # Never run (the notebook was stopped before it): an untested cell must not count as passed.
                reason = problem or "the notebook stopped before this cell"
                cell.outputs = [NotebookNode(output_type="error", ename="NotRun", evalue=f"not run: {reason}",
                                             traceback=[f"NotRun: {reason}"])]
            else:
                cell.outputs = executed.cells[index].get("outputs", [])
                cell.execution_count = executed.cells[index].get("execution_count")
        if executed is None:
            self.log.error("sandboxed execution failed: %s\n%s", problem, run.output[-3000:])
        return nb, resources


RUN_RECORD = "run.json"      # beside the sandbox's work folder, out of its reach: what the grader concluded


def in_run_budget_s(cell_timeout_s: int, steps: int) -> float:
    """Seconds the sandbox gets after the notebook for the re-check that follows it: that of a re-check run of
    `steps` steps (autograde.recheck.recheck_wall_s), plus the runner's own clean-up."""
    from autograde.recheck import recheck_wall_s
    return recheck_wall_s(cell_timeout_s, steps) + 10


@dataclass
class RunRecord:
    flags: list[str]            # why the instructor should look at this submission, in the grader's words
    distrusted: str = ""        # why the run's notebook cannot be used at all, or ""


def run_record(report: list[dict], data: bytes | None, timed_out: bool) -> RunRecord:
    """What the sandbox runner's private report (sandbox_runner.private_channel) says of a run.

    report: its lines, in order: {"notebook": sha256 of each out.ipynb it wrote}, {"kernel": what the check
    after the last cell found changed in the kernel}, {"done": true} at its end, or {"error": why it failed}.
    data: out.ipynb as the grader found it (None: missing or unreadable). timed_out: stopped by the grader's wall clock,
    which is no one's doing, so a check that it cut short is not held against the submission."""
    flags, distrusted = [], ""
    written = [entry["notebook"] for entry in report if "notebook" in entry]
    # A runner that reached its end left its last notebook in place. One stopped on the way may have reported a
    # notebook it had not yet swapped in, leaving the one before: that only leaves later cells not run, which the
    # re-check grades.
    finished = any(entry.get("done") for entry in report)
    usable = written[-1:] if finished else written
    if (data is None) != (not written) or (data is not None and hashlib.sha256(data).hexdigest() not in usable):
        distrusted = ("the notebook's results were changed after the grader wrote them, by a process the notebook "
                      "started, so none of them counts")
        flags.append(distrusted)
    changes = next((entry["kernel"] for entry in report if "kernel" in entry), None)
    if isinstance(changes, list) and changes:
        flags.append("the notebook changed how its kernel runs cells: " + "; ".join(str(c)[:200] for c in changes[:20]))
    elif changes is None and not timed_out:
        errors = [str(entry["error"])[:300] for entry in report if "error" in entry]
        why = (f"the grader's runner failed ({errors[-1]})" if errors
               else "the kernel kept dying (the grader reruns a notebook at most three times)"
               if any(entry.get("done") for entry in report)
               else "the grader's runner was stopped before its end, by the notebook's code")
        flags.append(f"the grader could not check the kernel after the last cell: {why}")
    return RunRecord(flags, distrusted)


def _record_timings(work, started: float, ended: float, nb) -> None:
    """Where the notebook's run spent its time, for `make bench` (grading.Result.timings). The runner's
    timestamps come from inside the sandbox, so they only ever feed this benchmark, never a grade."""
    import json

    from autograde.untrusted import read_bytes
    seconds = {"sandbox_run": ended - started}
    try:
        raw = json.loads(read_bytes(work / "out.ipynb.timings.json", 2**20))
        # after the notebook's runs, the re-check the runner ran in the same sandbox
        seconds["recheck_in_sandbox"] = max(0.0, ended - float(raw["end"]))
        first_run = raw["runs"][0]
        seconds["sandbox_start"] = float(raw["runner_start"]) - started
        seconds["kernel_start"] = float(first_run["kernel_ready"]) - float(first_run["start"])
        done = {int(k): float(v) for k, v in first_run["cells"].items()}
        code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        if code and code[0] in done:     # the first code cell: the imports
            seconds["imports"] = done[code[0]] - float(first_run["kernel_ready"])
        seconds["cells"] = max(done.values(), default=float(first_run["kernel_ready"])) - \
            float(first_run["kernel_ready"]) - seconds.get("imports", 0.0)
        seconds["reruns"] = float(raw["end"]) - (max(done.values()) if len(raw["runs"]) > 1 else float(raw["end"]))
    except Exception:  # noqa: BLE001 - a benchmark figure, never worth failing a grade over
        pass
    (work.parent / "timings.json").write_text(json.dumps(seconds))
