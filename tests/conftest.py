"""Shared fixtures. Environment settings come first: they must precede importing torch."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Chapter 10's Triton kernels run in the interpreter on a CPU; Triton reads this when a kernel is defined.
os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from coursekit.layout import REPO_ROOT as REPO  # noqa: E402


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """graded(assignment) -> {student id: result}: each chapter's solution, untouched release, known-wrong
    implementations and cheats (grading.chapter_submissions), graded once per test session in one CLI call,
    on first use, for every test module that checks grading."""
    from tests.grading import grade_chapter
    cache: dict[str, dict] = {}

    def get(assignment: str) -> dict[str, dict]:
        if assignment not in cache:
            folder = tmp_path_factory.mktemp(f"{assignment}-graded")
            GRADED_FOLDERS[assignment] = folder
            cache[assignment] = grade_chapter(assignment, folder)
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


def pytest_collection_modifyitems(config, items):
    """`make test` runs the suite in two processes (pytest-xdist, --dist loadgroup): half of it waits on browsers,
    servers and timeouts, which the other half's computing fills. A process computes each expensive fixture for
    itself, so the tests that share one run in the same process: those of one module (module fixtures: a site,
    a class graded once), and all that use a chapter's `graded` submissions, whatever their module."""
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if {"graded", "graded_folder"} & set(item.fixturenames) and params and "assignment" in params:
            group = f"graded-{params['assignment']}"
        else:
            group = item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))
