"""Grading on a Dask cluster (autograde/cluster.py): a LocalCluster of two worker processes grades eight of chapter
1's class (honest, wrong and hostile) through the real CLI, and gets the results the local grading got for the same
files; a worker killed while it grades loses no submission, and the report holds each student once."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.grading import packed_wrongs, wrongs_id
from tests.submissions import REPO

pytestmark = pytest.mark.slow       # grades a class: not in `make test-fast`

A = "ch01_qkv_softmax"
# What decides a grade, and must not depend on where it was graded (timings and paths do).
SAME = ("score", "max_score", "cells", "notes", "error", "flagged", "sha256", "graded_with", "sandboxed")


def _eight(folder) -> list:
    """Eight submissions of the graded class (tests/grading.py): honest, wrong, cheating, and one not gradable."""
    names = ["solution", "untouched", "zh-solution", *(wrongs_id(g) for g in packed_wrongs(A)[:2]), "input_transformer",
             "swallow_exceptions"]
    files = [folder / "submissions" / f"{name}.ipynb" for name in names]
    broken = folder / "not_a_notebook.ipynb"
    broken.write_bytes(b"\xff\xfe not json")
    return [*files, broken]


def test_a_dask_cluster_grades_as_the_local_run_does_and_loses_nothing_when_a_worker_dies(graded, graded_folder,
                                                                                          tmp_path):
    import dask
    from distributed import Client, LocalCluster

    local = graded(A)
    files = _eight(graded_folder(A))
    assert all(f.is_file() for f in files)
    # The broken file is graded locally here, for the same comparison.
    alone = subprocess.run([sys.executable, "-m", "autograde", "grade", A, str(files[-1]), "--json",
                            "--workspace", str(tmp_path / "local")], cwd=REPO, capture_output=True, text=True,
                           timeout=600)
    assert alone.returncode == 0, alone.stderr[-3000:]
    local = {**local, **{r["student"]: r for r in json.loads(alone.stdout)}}

    # The workers grade under their TMPDIR (cluster.worker_course): a folder of this test's, with a short path, since
    # the grading's forkserver puts a Unix socket there (at most 107 bytes of path; pytest's folders are longer).
    workers = Path(tempfile.mkdtemp(prefix="attnlab-dask-"))
    # Grading starts processes of its own, which a daemonic worker process may not (cluster.grade_one).
    try:
        with dask.config.set({"distributed.worker.daemon": False}), \
                LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                             env={"TMPDIR": str(workers)}) as cluster, Client(cluster) as client:
            run, killed = _grade_killing_a_worker(cluster, client, files, tmp_path / "cluster")
    finally:
        shutil.rmtree(workers, ignore_errors=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert killed, "no worker was killed: the test did not test a death"
    results = json.loads(run.stdout)
    students = [r["student"] for r in results]
    assert sorted(students) == sorted(set(students)) == sorted(f.stem for f in files), students
    for result in results:
        want = local[result["student"]]
        differ = {key: (result[key], want[key]) for key in SAME if result[key] != want[key]}
        assert not differ, f"{result['student']}: graded on the cluster differs from the local grading: {differ}"
        assert result["feedback"].startswith(str(tmp_path / "cluster")) and os.path.isfile(result["feedback"])


def _grade_killing_a_worker(cluster, client, files: list, workspace: Path):
    """The CLI grading `files` on the cluster while a thread kills (SIGKILL) a worker once it is grading one."""
    pids = client.run(os.getpid)                               # {worker address: its process id}
    killed: list[int] = []

    def kill_one_worker_mid_grading():
        for _ in range(6000):
            busy = [address for address, keys in client.processing().items() if keys]
            if busy:
                time.sleep(1.0)                                # inside the grading, not at its very start
                os.kill(pids[busy[0]], signal.SIGKILL)
                killed.append(pids[busy[0]])
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_worker_mid_grading, daemon=True)
    killer.start()
    run = subprocess.run([sys.executable, "-m", "autograde", "grade", A, *map(str, files), "--json",
                          "--scheduler", cluster.scheduler_address, "--workspace", str(workspace)],
                         cwd=REPO, capture_output=True, text=True, timeout=1800)
    killer.join(timeout=5)
    return run, killed
