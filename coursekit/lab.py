"""`make lab`: JupyterLab on exercises/ as a student sees it.

nbgrader's student tools (validate, assignment list) stay on; its instructor tools (formgrader,
create assignment, course list) are turned off by the configuration in jupyter_student/.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDENT_CONFIG = Path(__file__).resolve().parent / "jupyter_student"


def command(extra: list[str]) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(STUDENT_CONFIG), env.get("JUPYTER_CONFIG_PATH")]))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", "--no-browser",
            f"--ServerApp.root_dir={ROOT / 'exercises'}", *extra]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")   # containers and CI often run as root
    return args, env


def main(argv: list[str]) -> None:
    args, env = command(argv)
    os.execve(sys.executable, args, env)


if __name__ == "__main__":
    main(sys.argv[1:])
