"""Autograding: seconds per submission through the CLI (solution and untouched release)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from bench.timing import GRADING_ENV
from coursekit.layout import REPO_ROOT as REPO
from tests.submissions import released, submission

ASSIGNMENT = "ch01_qkv_softmax"


def run(n_each: int = 3) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
        files = []
        for i in range(n_each):
            for name, nb in (("solution", submission(ASSIGNMENT)), ("blank", released(ASSIGNMENT))):
                path = Path(tmp) / f"{name}{i}.ipynb"
                nbformat.write(nb, path)
                files.append(str(path))
        # A first run records the assignment in the gradebook; only the grading itself is timed below.
        subprocess.run([sys.executable, "-m", "autograde", "grade", ASSIGNMENT, files[0], "--workspace", f"{tmp}/ws"],
                       cwd=REPO, env=GRADING_ENV, check=True, capture_output=True)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autograde", "grade", ASSIGNMENT, *files, "--workspace", f"{tmp}/ws"],
                       cwd=REPO, env=GRADING_ENV, check=True, capture_output=True)
        seconds = time.perf_counter() - start
    return [f"autograde {ASSIGNMENT}: {len(files)} submissions in {seconds:.1f} s, "
            f"{seconds / len(files):.1f} s per submission (one at a time, including the CLI start)"]
