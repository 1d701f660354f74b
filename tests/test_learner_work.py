"""A learner's work is never lost: they work in work/ (made by `make lab`), JupyterLab's save adds metadata
that no check mistakes for drift, and no `make` target overwrites what they typed.

The test runs on a copy of the repository (sharing its .venv), as a learner would: `make lab`, then the real
JupyterLab in Debian's chromium, Ctrl+S on the release and on the learner's notebook, then every make target."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.browser import ARGS, CHROMIUM
from tests.lab_session import Lab as LabSession
from tests.submissions import REPO, solution_code

ASSIGNMENT = "ch01_qkv_softmax"
NOTEBOOK = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
LEARNER_MARK = "# my own softmax, typed in JupyterLab"


def _copy_repository(target: Path) -> Path:
    """The repository's files as a fresh clone has them (tracked and not ignored), mtimes kept, .venv shared."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)
    os.symlink(REPO / ".venv", target / ".venv")
    return target


def _make(course: Path, *targets: str, timeout: int = 900) -> subprocess.CompletedProcess:
    # -o: the shared .venv counts as installed, so nothing reinstalls it for this copy
    return subprocess.run(["make", "-o", ".venv/.installed", *targets], cwd=course, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PATH": os.environ["PATH"]})


def Lab(course: Path, root: Path | None = None) -> LabSession:
    """`make lab` in the course copy (the shared .venv counts as installed), or coursekit.lab serving `root`, as
    the Makefile runs it; with the test's own environment."""
    def command(port: int) -> list[str]:
        if root is not None:
            return [str(REPO / ".venv" / "bin" / "python"), "-m", "coursekit.lab", "--port", str(port),
                    "--work", str(root)]
        return ["make", "-o", ".venv/.installed", "lab", f"LAB_PORT={port}"]
    return LabSession(course, command=command, env=dict(os.environ))


def _save_in_jupyterlab(lab: LabSession, path: str, edit: str | None = None) -> None:
    """Open `path` in JupyterLab in chromium, optionally type `edit` at the start of the softmax_np cell,
    and press Ctrl+S, as a learner does."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"http://127.0.0.1:{lab.port}/lab/tree/{path}?token={lab.token}", wait_until="load")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120000)
        # the kernel has started and JupyterLab has its language_info (which the save writes)
        page.wait_for_function("() => /\\| Idle/.test(document.querySelector('#jp-main-statusbar').innerText)",
                               timeout=120000)
        # run the imports cell, as a learner would
        page.locator(".jp-CodeCell", has_text="import numpy as np").first.locator(".cm-content").click()
        page.keyboard.press("Shift+Enter")
        page.wait_for_function("() => /\\| Idle/.test(document.querySelector('#jp-main-statusbar').innerText)",
                               timeout=120000)
        if edit is not None:
            cell = page.locator(".jp-Cell", has_text="def softmax_np").first
            cell.locator(".cm-content").click()
            page.keyboard.press("Control+Home")
            page.keyboard.type(edit + "\n")
        page.keyboard.press("Control+s")
        page.wait_for_function("() => !document.title.startsWith('*') && !document.querySelector('.jp-mod-dirty')",
                               timeout=60000)
        time.sleep(1)
        browser.close()


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is needed: make installs it (coursekit/system_packages.sh)")
    return _copy_repository(tmp_path_factory.mktemp("learner") / "course")


@pytest.mark.slow
def test_saved_notebooks_survive_every_make_target(course):
    release = course / "exercises" / NOTEBOOK
    release_before = release.read_bytes()

    lab = Lab(course)
    try:
        assert (course / "work" / NOTEBOOK).is_file(), "make lab makes the learner's copy, work/, on first use"
        assert "Open this address in your browser" in lab.printed
        served = lab.api("GET", f"/api/contents/{ASSIGNMENT}")
        assert f"{ASSIGNMENT}.ipynb" in [item["name"] for item in served["content"]], "make lab serves work/"
        # The learner's answer, then their own line typed in the browser, saved with Ctrl+S.
        model = lab.api("GET", f"/api/contents/{NOTEBOOK}")
        nb = nbformat.from_dict(model["content"])
        answer = solution_code(ASSIGNMENT)["softmax_np"]
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax_np":
                cell.source = answer
        lab.api("PUT", f"/api/contents/{NOTEBOOK}", {"type": "notebook", "format": "json", "content": nb})
        _save_in_jupyterlab(lab, NOTEBOOK, edit=LEARNER_MARK)
    finally:
        lab.stop()

    # The release itself opened and saved with no edit, as a learner did before work/ existed.
    lab = Lab(course, root=course / "exercises")
    try:
        _save_in_jupyterlab(lab, NOTEBOOK)
    finally:
        lab.stop()
    assert release.read_bytes() != release_before, "JupyterLab's save changes the file (its metadata)"

    def learner_cell() -> str:
        nb = nbformat.read(course / "work" / NOTEBOOK, as_version=4)
        return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax_np")

    saved = learner_cell()
    assert saved.startswith(LEARNER_MARK) and answer in saved, saved

    check = subprocess.run([sys.executable, "-m", "coursekit.sync", "--check"], cwd=course, capture_output=True,
                           text=True, timeout=600)
    assert check.returncode == 0, "a release opened and saved in JupyterLab is not drift:\n" + check.stdout

    for target in ("help", "setup", "sync", "export", "refresh", "clean", "sync", "export", "refresh"):
        run = _make(course, target)
        assert run.returncode == 0, f"make {target}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        assert learner_cell() == saved, f"make {target} changed the learner's notebook"
    assert "softmax_np" in (course / "_student" / "attnlab" / "layers" / "softmax.py").read_text()
    assert LEARNER_MARK in (course / "_student" / "attnlab" / "layers" / "softmax.py").read_text(), \
        "make export reads the learner's own copy in work/"

    # Grading accepts the saved release (no "out of date"), and grades the learner's notebook.
    inbox = course / "autograde" / "inbox" / ASSIGNMENT
    inbox.mkdir(parents=True)
    shutil.copy(course / "work" / NOTEBOOK, inbox / "learner.ipynb")
    run = _make(course, "grade", f"ASSIGNMENT={ASSIGNMENT}", "WORKERS=1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((course / "autograde" / "results" / ASSIGNMENT / "learner.json").read_text())
    assert not result["error"], result["error"]
    assert next(c for c in result["cells"] if c["cell"] == "test_softmax_np")["score"] > 0, result["cells"]
    assert learner_cell() == saved

    # The targets that run for minutes (building, testing, benchmarking, training, serving) never name work/.
    for target in ("book", "serve", "test", "bench", "train"):
        dry = _make(course, "-n", target)
        assert dry.returncode == 0 and "work" not in dry.stdout.replace("--keep-going", ""), dry.stdout


@pytest.mark.slow
def test_sync_keeps_answers_typed_into_exercises(course):
    """Before work/ existed, learners typed into exercises/. `make sync` then copies their notebook into work/
    before it regenerates the release, and says so."""
    release = course / "exercises" / NOTEBOOK
    nb = nbformat.read(release, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax_np":
            cell.source = "# typed into exercises/\n" + solution_code(ASSIGNMENT)["softmax_np"]
    nbformat.write(nb, release)
    run = _make(course, "sync")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kept your edits" in run.stdout, run.stdout
    kept = [p for p in (course / "work" / ASSIGNMENT).glob("*.ipynb") if "typed into exercises/" in p.read_text()]
    assert kept, "the edited notebook must be copied into work/ before sync regenerates it"
    assert "typed into exercises/" not in release.read_text(), "exercises/ holds the release again"
