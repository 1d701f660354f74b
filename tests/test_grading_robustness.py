"""The class workflow (roster, inbox, reruns, grades.csv, summary), usage errors, and the feedback page
in a real browser. Hostile submissions are in test_hostile.py."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.grading import cells, wrong_result
from tests.submissions import REPO, known_wrong, released, solution_code, submission, write

pytestmark = pytest.mark.slow       # grades classes or drives the built site: not in `make test-fast`

A = "ch01_qkv_softmax"
WRONG = {w["name"]: w for w in known_wrong(A)}


def _class(workspace: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograde", "class", A, "--workspace", str(workspace), "--workers", "2",
                           "--cell-timeout", "20", *extra], cwd=REPO, capture_output=True, text=True, timeout=1800)


def test_class_with_roster_inbox_and_rerun(tmp_path):
    workspace = tmp_path / "ws"
    inbox = workspace / "inbox" / A
    inbox.mkdir(parents=True)
    write(submission(A), inbox / "alice.ipynb")
    write(released(A), inbox / "bob.ipynb")
    (inbox / "carol.ipynb").write_bytes(b"not a notebook")
    write(submission(A), inbox / "mallory.ipynb")                 # not on the roster
    (workspace / "roster.csv").write_text("id,name\nalice,Alice A.\nbob,Bob B.\ncarol,Carol C.\ndave,Dave D.\n")
    # nbgrader's layout is read too; a folder's own notebook name wins over other notebooks in it
    legacy = workspace / "submitted" / "erin" / A
    legacy.mkdir(parents=True)
    write(released(A), legacy / "Untitled.ipynb")
    write(submission(A), legacy / f"{A}.ipynb")

    run = _class(workspace)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {r["student"]: r for r in csv.DictReader((workspace / "grades.csv").open())}
    assert {s: rows[s]["score"] for s in rows} == {"alice": "16", "bob": "0", "carol": "0", "dave": "0", "erin": "16",
                                                   "mallory": "16"}
    assert rows["alice"]["name"] == "Alice A." and rows["dave"]["note"] == "no submission"
    assert "not valid notebook JSON" in rows["carol"]["note"] and "not on the roster" in rows["mallory"]["note"]
    summary = (workspace / "reports" / A / "summary.md").read_text()
    assert "test_softmax_np" in summary and "NotImplementedError" in summary
    assert (workspace / "reports" / A / "summary.png").stat().st_size > 1000

    # A rerun after an interruption grades only what is new or changed.
    write(submission(A, {WRONG["sdpa_inverted_mask"]["cell"]: WRONG["sdpa_inverted_mask"]["code"]}), inbox / "bob.ipynb")
    stored = {p.stem: p.stat().st_mtime_ns for p in (workspace / "results" / A).glob("*.json")}
    rerun = _class(workspace, "--json")
    results = {r["student"]: r for r in json.loads(rerun.stdout)}
    assert results["bob"]["score"] == 13 and results["alice"]["score"] == 16
    regraded = {p.stem for p in (workspace / "results" / A).glob("*.json") if p.stat().st_mtime_ns != stored.get(p.stem)}
    assert regraded == {"bob"}, regraded

    # Other limits are another grading: slow cells given more time must not keep the grades of the old limit.
    stored = {p.stem: p.stat().st_mtime_ns for p in (workspace / "results" / A).glob("*.json")}
    rerun = _class(workspace, "--cell-timeout", "30")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    regraded = {p.stem for p in (workspace / "results" / A).glob("*.json") if p.stat().st_mtime_ns != stored.get(p.stem)}
    assert regraded == set(stored), regraded


def test_usage_errors_exit_2(tmp_path):
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", "ch99_nothing", "x.ipynb"], cwd=REPO,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "unknown assignment 'ch99_nothing'" in run.stderr
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", A, str(tmp_path / "missing.ipynb"),
                          "--workspace", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "no such file" in run.stderr


def test_known_wrong_caught_only_by_hidden_tests_still_loses(graded):
    """The -1e4 mask and the ignored axis pass every visible check; the hidden tests catch them (in chapter 1's
    class, graded once for the session: conftest.graded)."""
    for name, cell in [("sdpa_mask_minus_1e4", "test_sdpa_mask"), ("softmax_np_ignores_axis", "test_softmax_np")]:
        assert cells(wrong_result(graded(A), A, WRONG[name])[0])[cell]["score"] == 0, name


def test_feedback_math_renders_offline_in_a_browser(graded, repo):
    from tests.browser import browser

    feedback = Path(wrong_result(graded(A), A, WRONG["sdpa_inverted_mask"])[0]["feedback"])
    with browser() as b:
        b.page.goto(feedback.as_uri(), wait_until="load")
        b.wait_for_math(minimum=5)
        text = b.page.inner_text("body")
        assert "Blocked positions must get weight exactly 0" in text   # the visible test's message reaches the student
        shots = repo / "_build" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        b.page.screenshot(path=str(shots / "feedback_ch01.png"), full_page=True)
        assert not b.remote_requests(), b.remote_requests()


def test_a_rerun_keeps_a_grade_only_for_the_same_bytes_graded_the_same_way():
    from autograde.grading import GRADING_FAILED, Result, reusable

    graded = Result("ann", A, 16, 16, sha256="abc", graded_with="limits-1")
    assert reusable(graded, "abc", "limits-1", has_feedback=True)
    assert not reusable(graded, "abd", "limits-1", has_feedback=True), "the submission changed"
    assert not reusable(graded, "abc", "limits-2", has_feedback=True), "the release, tests or limits changed"
    assert not reusable(graded, "abc", "limits-1", has_feedback=False), "its feedback page is gone"
    not_a_notebook = Result("ann", A, 0, 16, error="not graded: not valid notebook JSON", sha256="abc",
                            graded_with="limits-1")
    assert reusable(not_a_notebook, "abc", "limits-1", has_feedback=False)
    failed = Result("ann", A, 0, 16, error=f"{GRADING_FAILED}exit status -9", sha256="abc", graded_with="limits-1")
    assert not reusable(failed, "abc", "limits-1", has_feedback=False), "a failed grading is tried again"


@pytest.mark.parametrize("sandbox", [True, False])
def test_the_kernel_is_told_it_is_being_graded_with_or_without_the_sandbox(tmp_path, sandbox):
    """ATTNLAB_GRADING reaches the student's kernel both ways: chapters 7 and 8 skip their SmolLM2 demos on it.
    The first exercise's answer asserts it, so the solution keeps full marks only if the kernel sees it."""
    first, code = next(iter(solution_code(A).items()))
    nb = submission(A, {first: 'import os\nassert os.environ.get("ATTNLAB_GRADING") == "1"\n' + code})
    path = write(nb, tmp_path / "in" / "told.ipynb")
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", A, str(path), "--json", "--workspace",
                          str(tmp_path / "w"), "--cell-timeout", "20", *([] if sandbox else ["--no-sandbox"])],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    (result,) = json.loads(run.stdout)
    assert result["sandboxed"] == sandbox and result["score"] == result["max_score"], result


THREE_FORKS = """import os, time
import numpy as np
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = np.ones(500 * 2**20, dtype=np.uint8)     # 500 MiB, every page touched
        time.sleep(3)
        os._exit(0)
    children.append(pid)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
print("children stopped by the memory limit:", sum(os.WIFSIGNALED(s) for s in statuses))"""


def test_a_submissions_processes_share_one_memory_limit(tmp_path):
    """Three forked processes of 500 MiB each, graded with --memory-limit 1 (GiB for all of the submission's
    processes together): the limit stops at least one of them, grading goes on, and the correct answers keep
    their points. With only the per-process limit, all three ran to the end."""
    from tests.hostile_cases import A, after, submission

    path = tmp_path / "three_forks.ipynb"
    nbformat.write(submission(A, after("softmax_np", THREE_FORKS)), path)
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", A, str(path), "--json", "--memory-limit", "1",
                          "--workspace", str(tmp_path / "ws"), "--cell-timeout", "30"],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    [result] = json.loads(run.stdout)
    assert result["score"] == 16, result
    [graded] = (tmp_path / "ws").rglob(f"autograded/three_forks/{A}/{A}.ipynb")
    printed = "".join(o.get("text", "") for c in nbformat.read(graded, as_version=4).cells
                      if c.cell_type == "code" for o in c.get("outputs", []))
    stopped = int(printed.split("children stopped by the memory limit:")[1].split()[0])
    assert stopped >= 1, printed[-500:]


SLOW_CELLS = {
    # name: (the cell, where the student put it: before the notebook's first cell, or right after it)
    "sleep_forever_at_the_top": ("import time\ntime.sleep(10**6)", 0),
    "file_system_walk_after_the_title": ("import glob\nfound = glob.glob('/**/*.ipynb', recursive=True)\nlen(found)", 1),
    "ignores_interrupt_at_the_top": ("import time\nwhile True:\n    try:\n        time.sleep(100)\n"
                                     "    except KeyboardInterrupt:\n        pass", 0),
    # a draft kept at the top: the real function further down is the one the student's kernel ends with
    "draft_at_the_top": ("def softmax_np(x, axis=-1):\n    return x", 0),
}


@pytest.mark.parametrize("load", ["idle", "a busy process on every core"])
def test_slow_cells_cost_their_own_time_only_whatever_the_load(tmp_path, load):
    """Chapter 1's solution with one cell of the student's own that never ends (an endless sleep, a file-system
    walk, a loop that swallows the interrupt), or a draft, at the top of the notebook or after its first cell,
    graded as a class with 2 workers: every one keeps 16/16, unflagged, whether the machine is idle or two busy
    processes load every core, and the class takes minutes, not the whole-notebook limit. Before, a cell added
    there ran after every prose cell (7 times in chapter 1): it ran out the notebook's clock, then the re-check's,
    and every test scored 0; the draft, copied after the real function, cost 3 points."""
    import os
    import time

    files = []
    for name, (code, position) in SLOW_CELLS.items():
        nb = submission(A)
        nb.cells.insert(position, nbformat.v4.new_code_cell(code))
        files.append(write(nb, tmp_path / f"{name}.ipynb"))
    busy = [] if load == "idle" else [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                                      for _ in range(max(2, os.cpu_count() or 1))]
    started = time.monotonic()
    try:
        run = subprocess.run([sys.executable, "-m", "autograde", "grade", A, *map(str, files), "--workers", "2",
                              "--workspace", str(tmp_path / "ws"), "--cell-timeout", "10"],
                             cwd=REPO, capture_output=True, text=True, timeout=900)
    finally:
        for process in busy:
            process.kill()
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stdout)          # per submission: the time of the notebook's run and of the re-check
    results = {path.stem: json.loads((tmp_path / "ws" / "results" / A / f"{path.stem}.json").read_text())
               for path in files}
    for name, result in results.items():
        assert result["score"] == 16 and not result["flagged"], json.dumps(result)[:3000]
        assert f"{name}: 16 / 16  [" in run.stdout and "notebook " in run.stdout and "re-check " in run.stdout
    assert seconds < 600, f"the class took {seconds:.0f} s"
    # told in the student's words, with the cell's number in their own notebook
    assert results["sleep_forever_at_the_top"]["slow_cells"] == [
        "cell 1 ran past the 10 s limit and was stopped at line 2; the cells after it ran normally, with what its "
        "lines before line 2 had defined"]
    assert results["ignores_interrupt_at_the_top"]["slow_cells"] == [
        "cell 1 ran past the 10 s limit and ignored the interrupt, so it was stopped; the notebook was run again "
        "without it, and the cells after it ran normally"]
    page = Path(results["sleep_forever_at_the_top"]["feedback"]).read_text(encoding="utf-8")
    assert "Stopped at the time limit." in page and "cell 1 ran past the 10 s limit" in page
    assert results["draft_at_the_top"]["slow_cells"] == []
