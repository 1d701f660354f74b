"""Grading past one machine: the submissions of a class mapped over the workers of a Dask cluster.

    python -m autograde class ASSIGNMENT --scheduler tcp://HOST:8786      (make grade SCHEDULER=tcp://HOST:8786)

The instructor's process (the client) reads the submissions, decides which need grading (a rerun keeps the results
of unchanged files, as without a cluster), and sends each as one GradingJob: the notebook's bytes, not a path, so a
worker needs no view of the instructor's files. A worker grades it with `grade_one` in a workspace of its own, in
its own sandbox, and sends back the Result and the feedback page's text; the client writes both into its workspace,
where the class's CSV and summary are made. Each worker runs from a checkout of the course with its environment
(`make setup`), with one thread, and not daemonic (DASK_DISTRIBUTED__WORKER__DAEMON=False): a submission's grading
is itself several processes (nbgrader, the sandbox), which a daemonic process may not start.

A worker that dies mid-class (killed, out of memory, its machine gone) loses nothing: the scheduler gives its
submission to another worker, and the report holds each student once, since the client keeps one result per
student. A submission whose workers die MAX_WORKER_DEATHS times is reported as not graded (an error that a rerun
grades again), never as a zero.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autograde import memory_group, sandbox
from autograde.grading import GRADING_FAILED, Course, Result, grade, reusable, submission_timeout, ungradable

MAX_WORKER_DEATHS = 3          # Dask's own limit (distributed.scheduler.allowed-failures), stated here for the docs


@dataclass(frozen=True)
class GradingJob:
    """One submission to grade: everything a worker needs, and nothing that only the client's machine has."""
    assignment: str
    student: str
    notebook: bytes                    # the submitted file's bytes, as read by the client
    cell_timeout_s: int
    submission_timeout_s: int
    use_sandbox: bool = True
    memory_limit_gib: float | None = None
    workspace: str = ""                # the worker's grading folder; "" for one under the system's temporary folder


@dataclass
class GradedSubmission:
    """What a worker sends back: the Result, and the feedback page it wrote (the client writes its own copy)."""
    result: Result
    feedback_html: str
    worker: str                        # host and process that graded it


_courses: dict[tuple[str, str], Course] = {}
_prepare_lock = threading.Lock()


def worker_course(assignment: str, workspace: str = "") -> Course:
    """This process's Course for `assignment`, prepared on first use: a workspace per worker process, so that
    workers sharing a machine (or a file system) never prepare or grade in each other's folders."""
    key = (assignment, workspace)
    with _prepare_lock:
        if key not in _courses:
            root = Path(workspace or os.environ.get("TMPDIR", "/tmp")) / "attnlab-grading"
            course = Course(assignment, root / f"{socket.gethostname()}-{os.getpid()}")
            course.prepare()
            _courses[key] = course
        return _courses[key]


def grade_one(job: GradingJob) -> GradedSubmission:
    """Grade one submission on this worker: the same `grade` as a local class, in this worker's workspace."""
    if job.memory_limit_gib is not None:
        os.environ[memory_group.ENVIRONMENT] = str(job.memory_limit_gib)   # read by the sandbox
    where = f"{socket.gethostname()}:{os.getpid()}"
    if multiprocessing.current_process().daemon:
        raise RuntimeError(f"the worker on {where} runs as a daemonic process, which may start none of its own, and "
                           f"grading starts several: start the workers with DASK_DISTRIBUTED__WORKER__DAEMON=False")
    if job.use_sandbox and (reason := sandbox.available()):
        raise RuntimeError(f"the worker on {where} cannot sandbox student code: {reason}")
    course = worker_course(job.assignment, job.workspace)
    file = course.workspace / "received" / job.assignment / f"{job.student}.ipynb"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(job.notebook)
    result = grade(course, job.student, file, job.cell_timeout_s, job.submission_timeout_s, job.use_sandbox)
    page = Path(result.feedback)
    return GradedSubmission(result, page.read_text(encoding="utf-8") if result.feedback and page.is_file() else "",
                            where)


def grade_on_cluster(scheduler: str, course: Course, submissions: list[tuple[str, Path]], cell_timeout_s: int,
                     submission_timeout_s: int | None, use_sandbox: bool, only_if_changed: bool,
                     memory_limit_gib: float | None = None) -> Iterator[tuple[Result, float]]:
    """(result, seconds) for each (student, file), as they finish, graded on the cluster at `scheduler` (a Dask
    scheduler's address, tcp://HOST:8786). Unchanged submissions keep their stored results (only_if_changed)."""
    from distributed import Client, as_completed

    timeout_s = submission_timeout_s or submission_timeout(cell_timeout_s)
    settings = course.grading_settings(cell_timeout_s, timeout_s, use_sandbox)
    jobs = {}
    for student, file in submissions:
        raw = Path(file).read_bytes() if Path(file).is_file() else b""
        previous = course.load_result(student) if only_if_changed else None
        if previous is not None and reusable(previous, hashlib.sha256(raw).hexdigest(), settings,
                                             course.feedback(student).is_file()):
            yield previous, 0.0
            continue
        jobs[student] = (GradingJob(course.assignment, student, raw, cell_timeout_s, timeout_s, use_sandbox,
                                    memory_limit_gib), raw)
    if not jobs:
        return
    with Client(scheduler, timeout=60) as client:
        started = time.monotonic()
        # pure=False: a resubmitted file is graded again, not looked up; each future is one student
        futures = {client.submit(grade_one, job, key=f"grade-{job.assignment}-{student}-{time.time_ns()}",
                                 pure=False): student for student, (job, _) in jobs.items()}
        for future in as_completed(futures):
            student = futures[future]
            job, raw = jobs[student]
            try:
                graded = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker's failure or death: never a lost or zeroed grade
                failed = ungradable(course, student, course.max_score(),
                                    f"{GRADING_FAILED}on the cluster: {type(exc).__name__}: {exc}")
                course.save_result(failed)
                yield failed, time.monotonic() - started
                continue
            yield _keep(course, student, raw, graded), time.monotonic() - started


def _keep(course: Course, student: str, raw: bytes, graded: GradedSubmission) -> Result:
    """The worker's result in the client's workspace: the submitted file, the feedback page, the result file."""
    result = graded.result
    submitted = course.submitted(student)
    submitted.parent.mkdir(parents=True, exist_ok=True)
    submitted.write_bytes(raw)
    if graded.feedback_html:
        page = course.feedback(student)
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(graded.feedback_html, encoding="utf-8")
        result.feedback = str(page)
    course.save_result(result)
    return result
