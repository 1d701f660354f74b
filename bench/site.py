"""The website build, cold (empty output folder) and cached (a second build over the first)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coursekit.layout import REPO_ROOT as REPO


def _build(out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("jupyter-book")), "build", str(REPO), "--path-output", str(out),
                    "--all", "--builder", "html", "-W", "-n", "--keep-going"], check=True, capture_output=True)
    return time.perf_counter() - start


def run() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        cold = _build(Path(tmp))
        cached = _build(Path(tmp))
    return [f"website build: cold {cold:.1f} s, cached {cached:.1f} s, ratio cold/cached = {cold / cached:.1f}x"]
