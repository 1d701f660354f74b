"""The set-up behind every `make` target installs the Debian packages the course needs, or, without root,
stops at once and prints the exact command. Run with a fake PATH, so nothing is installed."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from coursekit.layout import REPO_ROOT

SCRIPT = REPO_ROOT / "coursekit" / "system_packages.sh"
PACKAGES = "chromium bubblewrap fonts-wqy-microhei"


def _fake_bin(tmp_path: Path, uid: int) -> Path:
    """A PATH with none of the packages: `id` says `uid`, apt-get records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("grep", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (bin_dir / "fc-list").write_text("#!/bin/sh\necho 'DejaVu Sans'\n")   # fonts, but none with Chinese glyphs
    (bin_dir / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'apt.log'}\n")
    for tool in ("id", "fc-list", "apt-get"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def _run(bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True, text=True)


def test_without_root_it_prints_the_command_and_installs_nothing(tmp_path):
    run = _run(_fake_bin(tmp_path, uid=1000))
    assert run.returncode == 1
    assert f"sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends {PACKAGES}'" in run.stderr
    assert not (tmp_path / "apt.log").exists(), "apt-get must not run without root"


def test_as_root_it_installs_what_is_missing(tmp_path):
    run = _run(_fake_bin(tmp_path, uid=0))
    assert run.returncode == 0, run.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls == ["update -qq", f"install -y -qq --no-install-recommends {PACKAGES}"], calls


def test_nothing_missing_means_nothing_to_do(tmp_path):
    bin_dir = _fake_bin(tmp_path, uid=1000)
    for tool in ("chromium", "bwrap"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    (bin_dir / "fc-list").write_text("#!/bin/sh\necho 'WenQuanYi Micro Hei'\n")
    run = _run(bin_dir)
    assert run.returncode == 0 and not run.stdout and not run.stderr, run.stdout + run.stderr
    assert not (tmp_path / "apt.log").exists()


def test_ci_keeps_no_install_logic_of_its_own():
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "apt-get" not in ci and "make test" in ci
