"""Shared fixtures. Environment settings come first: they must precede importing torch."""
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two processes on two cores, and each starts notebooks, kernels and graders of its own:
    # a second thread per process only contends (on 2 cores, the torch tests ran 10% faster on one thread each).
    # Tests about threads set their count themselves.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Chapter 10's Triton kernels run in the interpreter on a CPU; Triton reads this when a kernel is defined.
os.environ.setdefault("TRITON_INTERPRET", "1")

import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from coursekit.layout import REPO_ROOT as REPO  # noqa: E402


_TRITON_CACHE: list[str] = []


def pytest_configure(config):
    """One Triton cache for the run, which both test processes inherit (pytest-xdist starts them after this): the
    Hopper compiles of chapter 10's kernels (attnlab.kernels.hopper) then compile each kernel source once, not
    once in every run of a notebook or a probe that checks it. The sandbox clears its environment, so grading
    compiles afresh; a student's shell (tests/lab_session.student_env) does not have it either."""
    if "TRITON_CACHE_DIR" not in os.environ:
        _TRITON_CACHE.append(tempfile.mkdtemp(prefix="attnlab-tests-triton-"))
        os.environ["TRITON_CACHE_DIR"] = _TRITON_CACHE[0]


def pytest_unconfigure(config):
    for folder in _TRITON_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """graded(assignment) -> {student id: result}: each chapter's solution, untouched release, known-wrong
    implementations and cheats (grading.chapter_submissions), graded once per test session in one CLI call,
    on first use, for every test module that checks grading.

    `make test` runs the suite in two processes (pytest-xdist), each with its own session fixtures; the modules
    that use a chapter's class may run in either. So the class is graded once into a folder both processes see,
    under a lock: the first to need it grades it, the other waits and reads its results."""
    from filelock import FileLock

    from tests.grading import grade_chapter
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent                 # the run's folder, above each process's own
    cache: dict[str, dict] = {}

    def get(assignment: str) -> dict[str, dict]:
        if assignment not in cache:
            folder = shared / f"{assignment}-graded"
            with FileLock(str(folder) + ".lock"):
                results = folder / "results.json"
                if not results.is_file():
                    graded_now = grade_chapter(assignment, folder)
                    results.write_text(json.dumps(graded_now), encoding="utf-8")
                cache[assignment] = json.loads(results.read_text(encoding="utf-8"))
            GRADED_FOLDERS[assignment] = folder
        return cache[assignment]
    return get


GRADED_FOLDERS: dict[str, object] = {}


@pytest.fixture(scope="session")
def graded_folder(graded):
    """graded_folder(assignment) -> the folder `graded` graded that chapter in (its workspace/ holds feedback/)."""
    def get(assignment: str):
        graded(assignment)
        return GRADED_FOLDERS[assignment]
    return get
