"""`make lab`: JupyterLab on the learner's own copy of the exercises, work/ (made from exercises/ on first use).

    python -m coursekit.lab [--port 8888] [JupyterLab options...]

nbgrader's student tools (validate, assignment list) stay on; its instructor tools (formgrader,
create assignment, course list) are turned off by the configuration in jupyter_student/.
"""
from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from pathlib import Path

from coursekit.layout import REPO_ROOT as ROOT
from coursekit.workspace import WORK, course_language, ensure_work

STUDENT_CONFIG = Path(__file__).resolve().parent / "jupyter_student"
DEFAULT_PORT = 8888


def command(extra: list[str], root_dir: Path | None = None) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(STUDENT_CONFIG), env.get("JUPYTER_CONFIG_PATH")]))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", "--no-browser",
            f"--ServerApp.root_dir={root_dir or ROOT / WORK}", *extra]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")   # containers and CI often run as root
    return args, env


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=int(os.environ.get("LAB_PORT") or DEFAULT_PORT))
    parser.add_argument("--lang", default="", help="en or zh: the language of the notebooks copied into work/ "
                        "(default: the one asked for last, else English)")
    parser.add_argument("--work", type=Path, default=ROOT / WORK, help="the folder to serve (default: work/)")
    args, extra = parser.parse_known_args(argv)
    if not port_is_free(args.port):
        print(f"port {args.port} is already in use (another JupyterLab?): choose another with "
              f"`make lab LAB_PORT={args.port + 1}`", file=sys.stderr)
        return 2
    ensure_work(ROOT, args.work, language=course_language(args.lang))
    token = secrets.token_hex(16)
    url = f"http://127.0.0.1:{args.port}/lab?token={token}"
    print(f"\nYour exercises are in {args.work}/ (your own copy: only `make refresh` changes it, and it keeps your "
          "answers).\n"
          f"JupyterLab is starting. Open this address in your browser:\n\n    {url}\n\n"
          "Stop it with Ctrl+C.\n", flush=True)
    cmd, env = command([f"--port={args.port}", f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0",
                        *extra], root_dir=args.work)
    os.execve(sys.executable, cmd, env)
    return 0   # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
