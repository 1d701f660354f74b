"""A student's copy used as the student uses it: set up by its own `make setup`, JupyterLab started by its own
`make lab`, and a notebook of work/ run cell by cell through that server's kernel, as the browser runs it
(a session on the notebook's path, so the kernel starts in the notebook's folder; execute requests over the
kernel's websocket).

No PYTHONPATH anywhere: `import attnlab` in the kernel must work through what `make setup` wrote.
The copy's .venv is made beforehand as a venv whose packages are this one's (a .pth to our site-packages), so
its `make setup` finds every pinned package installed and installs nothing; everything else it does (the
attnlab-course.pth above all) is the copy's own Makefile at work.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import nbformat


def student_env() -> dict[str, str]:
    """The environment of a student's fresh shell: none of the variables the test suite or `make test` set."""
    ours = str(Path(sys.executable).parent)
    env = {key: value for key, value in os.environ.items()
           if key not in {"PYTHONPATH", "VIRTUAL_ENV", "ATTNLAB_GRADING", "TRITON_INTERPRET", "MAKEFLAGS",
                          "MAKELEVEL", "MFLAGS", "PYTHONHOME", "TRITON_CACHE_DIR"}}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    return env


def set_up_copy(copy: Path) -> subprocess.CompletedProcess:
    """A venv in copy/.venv that sees this interpreter's packages, then the copy's own `make setup`."""
    venv = copy / ".venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # Lines of a .pth join sys.path; .pth files inside the folder they name are not read, so our own
    # attnlab-course.pth (which points at this repository) does not leak into the copy.
    Path(purelib, "course-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return subprocess.run(["make", "setup"], cwd=copy, env=student_env(), capture_output=True, text=True,
                          timeout=600)


def copy_python(copy: Path, code: str, cwd: Path, extra_env: dict[str, str] | None = None,
                stdin: str | None = None) -> subprocess.CompletedProcess:
    """`.venv/bin/python -c code` of the copy, from cwd, in a student's shell."""
    return subprocess.run([str(copy / ".venv" / "bin" / "python"), "-c", code], cwd=cwd,
                          env=student_env() | (extra_env or {}), capture_output=True, text=True, timeout=900,
                          input=stdin)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """`make lab` in a folder (a student's copy by default: LANG=zh for `language`, a student's shell), running
    until close(): its address and token read from what it prints. `command(port)` and `env` replace the command
    and the shell, for a course checkout started another way (tests/test_learner_work.py)."""

    def __init__(self, course: Path, language: str | None = None,
                 command: Callable[[int], list[str]] | None = None, env: dict[str, str] | None = None):
        self.port = free_port()
        args = (command(self.port) if command is not None
                else ["make", "lab", f"LAB_PORT={self.port}"] + ([f"LANG={language}"] if language else []))
        self.log = Path(tempfile.mkstemp(prefix=f"lab-{self.port}-", suffix=".log")[1])
        self.process = subprocess.Popen(args, cwd=course, env=student_env() if env is None else env,
                                        stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 180
        self.token = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"make lab exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            found = re.search(r"/lab\?token=([0-9a-f]+)", self.log.read_text())
            if found:
                self.token = found[1]
                try:
                    self.api("GET", "/api/status")
                    self.printed = self.log.read_text()
                    return
                except OSError:
                    pass
            time.sleep(0.25)
        self.close()
        raise AssertionError(f"make lab did not answer within 180 s:\n{self.log.read_text()[-3000:]}")

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """A call of the server's REST API, with the token."""
        request = urllib.request.Request(self.base + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Authorization": f"token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
        return json.loads(text) if text else {}

    def run_notebook(self, path: str, timeout: float = 1800) -> list[dict]:
        """Every code cell of work/<path> run in order in a kernel of this server's session on that path:
        [{"cell": grade_id or cell id, "error": "Name: value" or None, "text": its stream output}]."""
        import websocket

        nb = nbformat.from_dict(self.api("GET", f"/api/contents/{path}")["content"])
        session = self.api("POST", "/api/sessions", {"path": path, "type": "notebook", "name": Path(path).name,
                                                     "kernel": {"name": "python3"}})
        kernel = session["kernel"]["id"]
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{self.port}/api/kernels/{kernel}/channels?token={self.token}", timeout=timeout)
        report = []
        try:
            client_session = uuid.uuid4().hex
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                outputs = self._execute(ws, client_session, cell.source, timeout)
                errors = [o for o in outputs if o["type"] == "error"]
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.get("id")
                report.append({"cell": grade_id,
                               "error": f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else None,
                               "text": "".join(o.get("text", "") for o in outputs)[-2000:]})
        finally:
            ws.close()
            self.api("DELETE", f"/api/sessions/{session['id']}")
        return report

    @staticmethod
    def _execute(ws, client_session: str, code: str, timeout: float) -> list[dict]:
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "username": "student", "session": client_session,
                       "msg_type": "execute_request", "version": "5.3",
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": False}}))
        outputs, replied, idle = [], False, False
        deadline = time.monotonic() + timeout
        while not (replied and idle):
            if time.monotonic() > deadline:
                raise AssertionError(f"a cell ran past {timeout} s:\n{code[:300]}")
            message = json.loads(ws.recv())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "execute_reply":
                replied = True
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
            elif kind == "stream":
                outputs.append({"type": "stream", "text": content["text"]})
            elif kind == "error":
                outputs.append({"type": "error", "ename": content["ename"], "evalue": content["evalue"]})
        return outputs

    def close(self) -> None:
        self.log.unlink(missing_ok=True)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    stop = close

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
