"""Grading a class: 60 chapter-1 submissions with 2 workers, the hostile-submission table, and submissions per
minute on a Dask cluster of 1 and 2 workers."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from bench.timing import GRADING_ENV
from coursekit.layout import REPO_ROOT as REPO
from tests.hostile_cases import cases, hidden_lines
from tests.submissions import known_wrong, released, submission, write

A = "ch01_qkv_softmax"
HOSTILE_CELL_TIMEOUT_S = 10     # the slow cases cost a few cell timeouts each: shorter than grading's 60 s


def _class_run(workspace: Path, workers: int, extra: list[str] = ()) -> tuple[list[dict], float]:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "autograde", "class", A, "--workspace", str(workspace),
                          "--workers", str(workers), "--json", *extra], cwd=REPO, env=GRADING_ENV, capture_output=True, text=True,
                         check=True)
    return json.loads(run.stdout), time.perf_counter() - start


def sixty() -> list[str]:
    wrong = known_wrong(A)
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        inbox = Path(tmp) / "inbox" / A
        inbox.mkdir(parents=True)
        for i in range(60):
            kind = i % 3
            nb = (submission(A) if kind == 0 else released(A) if kind == 1
                  else submission(A, {wrong[i % len(wrong)]["cell"]: wrong[i % len(wrong)]["code"]}))
            write(nb, inbox / f"student{i:02d}.ipynb")
        results, seconds = _class_run(Path(tmp), workers=2)
        _, rerun = _class_run(Path(tmp), workers=2)
    mean = sum(r["score"] for r in results) / len(results)
    return [f"class of {len(results)} chapter-1 submissions, 2 workers on 2 cores: {seconds:.0f} s "
            f"({seconds / len(results):.1f} s per submission), mean score {mean:.1f} / 16; "
            f"rerun with nothing changed: {rerun:.1f} s", *breakdown(results)]


# The phases of one submission's grading, as autograde records them (grading.Result.timings).
PHASES = [("worker_start", "the grading process's start (forked from one that has imported nbgrader and torch)"),
          ("sandbox_start", "sandbox start (bwrap, the runner's interpreter)"),
          ("kernel_start", "kernel start"), ("imports", "the notebook's imports cell"),
          ("cells", "the other cells (tests included)"), ("sandbox_run", "= the whole sandboxed notebook run"),
          ("nbgrader", "nbgrader's own preprocessors (autograde step less the sandboxed run)"),
          ("recheck", "out-of-process re-check (its own sandbox and torch import)"),
          ("feedback", "feedback rendering (2.1 MB of MathJax inlined per page)")]


def breakdown(results: list[dict]) -> list[str]:
    """Mean seconds per phase over the submissions that recorded them (each on its worker's clock)."""
    timed = [r["timings"] for r in results if r.get("timings")]
    if not timed:
        return ["no phase timings were recorded"]
    lines = [f"where one submission's time goes (mean over {len(timed)}, seconds, measured inside each worker):"]
    for key, label in PHASES:
        values = [t[key] for t in timed if key in t]
        if values:
            lines.append(f"  {sum(values) / len(values):6.2f}  {label}")
    return lines


def hostile_table() -> list[str]:
    hidden = hidden_lines()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        inbox = Path(tmp) / "inbox" / A
        inbox.mkdir(parents=True)
        with warnings.catch_warnings():     # nbformat warns about the duplicate_tests case: that is the case
            warnings.simplefilter("ignore")
            for name, (content, *_rest) in cases().items():
                path = inbox / f"{name}.ipynb"
                path.write_bytes(content) if isinstance(content, bytes) else write(content, path)
        results, seconds = _class_run(Path(tmp), workers=2, extra=["--cell-timeout", str(HOSTILE_CELL_TIMEOUT_S), "--submission-timeout", "240"])
        lines = [f"{'case':24s} {'expected':>8s} {'actual':>6s} {'flagged':>8s}  leaked  {'seconds':>7s}  (notebook + re-check)"]
        for r in results:
            expected = cases()[r["student"]][1]
            text = open(r["feedback"], encoding="utf-8").read()
            leaked = any(line in text for line in hidden)
            t = r.get("timings") or {}
            spent = f"{t.get('sandbox_run', 0) + t.get('recheck', 0):7.1f}" if t else f"{'-':>7s}"
            lines.append(f"{r['student']:24s} {'-' if expected is None else f'{expected:g}':>8s} {r['score']:6g} "
                         f"{str(r['flagged']):>8s}  {'LEAKED' if leaked else 'no':6s}  {spent}")
    return [f"hostile submissions: {len(results)} graded in {seconds:.0f} s with 2 workers, "
            f"cell timeout {HOSTILE_CELL_TIMEOUT_S} s", *lines]


def on_a_cluster(count: int = 12) -> list[str]:
    """Submissions per minute through a Dask LocalCluster of 1 and of 2 worker processes (python -m autograde grade
    ... --scheduler), the same files each time: what adding a worker buys. Each worker prepares the assignment
    once, on its first submission; that is counted, as it is in a real class."""
    import dask
    from distributed import LocalCluster

    wrong = known_wrong(A)
    rates = {}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        files = []
        for i in range(count):
            nb = submission(A) if i % 2 == 0 else submission(A, {wrong[i % len(wrong)]["cell"]: wrong[i % len(wrong)]["code"]})
            files.append(str(write(nb, Path(tmp) / "files" / f"student{i:02d}.ipynb")))
        for workers in (1, 2):
            (Path(tmp) / f"workers{workers}").mkdir()
            with dask.config.set({"distributed.worker.daemon": False}), \
                    LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                 env={"TMPDIR": str(Path(tmp) / f"workers{workers}")}) as cluster:
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "autograde", "grade", A, *files, "--json", "--scheduler",
                                cluster.scheduler_address, "--workspace", str(Path(tmp) / f"ws{workers}")],
                               cwd=REPO, env=GRADING_ENV, capture_output=True, text=True, check=True)
                rates[workers] = count * 60 / (time.perf_counter() - start)
    return [f"on a Dask cluster (LocalCluster on this machine, one thread per worker): {count} chapter-1 submissions, "
            f"1 worker {rates[1]:.1f} a minute, 2 workers {rates[2]:.1f} a minute ({rates[2] / rates[1]:.2f}x)"]


def run() -> list[str]:
    return sixty() + hostile_table() + on_a_cluster()
