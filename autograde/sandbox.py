"""Run untrusted code in a bubblewrap sandbox.

Inside: the system folders (/usr, /etc, /lib...) and the Python environment read-only, and nothing else of
the machine (no repository, no home folders, no other student); one private, writable work folder; only the earlier chapters' reference modules of
attnlab (so the current chapter cannot be imported instead of being written); no network (a fresh
network namespace with only loopback); its own process tree, killed as a whole when it ends; an
unprivileged user id of its own; limits on memory, processes, file size and wall-clock time.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograde.memory_group import MemoryGroup, stop_largest_if_over, submission_memory_bytes

NOBODY = 65534
# Each run gets a user id of its own, so that limits counted per user (processes) and files owned by the
# user belong to one submission only; ids in this range have no account and own nothing else.
UID_BASE, UID_SPAN = 200_000, 50_000
RUNNER = Path(__file__).resolve().with_name("sandbox_runner.py")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 6 * 2**30        # address space per process: a memory bomb gets MemoryError (all of a run's
                                         # processes together: memory_group.submission_memory_bytes())
    processes: int = 512                 # threads and processes of the sandbox user: a fork bomb stops here
    file_bytes: int = 256 * 2**20        # largest file it may write
    wall_s: float = 900                  # the whole run


WATCH_S = 0.2           # how often the memory watchdog looks, where no cgroup holds the run


@dataclass
class Result:
    returncode: int
    output: str
    timed_out: bool
    report: list[dict] = field(default_factory=list)    # what the runner sent over its private channel (reported=True)
    cut_after_done: bool = False    # stopped in the time given after the runner reported done (run's after_done_s)


REPORT_MAX_BYTES = 2**20      # a report line is a digest or a short list: a megabyte is thousands of cells


def available() -> str | None:
    """None when sandboxing works here, else the reason it does not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    if os.geteuid() != 0:
        return "the sandbox switches to an unprivileged user id, which needs root (grade as root, e.g. in a container)"
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--dev", "/dev",
                            "--proc", "/proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.strip()[:200]}"
    return None


def _ro_mount(path: Path) -> list[str]:
    """Mount `path` read-only, creating its parent folders world-traversable (the user nobody must reach it)."""
    args = []
    for parent in reversed(path.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args + ["--ro-bind", str(path), str(path)]


def _python_mounts() -> list[str]:
    """This interpreter's virtual environment and the Python installation it was made from."""
    prefixes = sorted({Path(sys.prefix), Path(sys.base_prefix)}, key=lambda p: len(p.parts))
    return [arg for prefix in prefixes for arg in _ro_mount(prefix)]


# The system folders the sandbox sees, read-only; nothing else of the machine exists inside it (other
# checkouts of the course, other students, home folders), apart from the Python environment and the
# run's own folders mounted below.
SYSTEM = ["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]


def _system_mounts() -> list[str]:
    args = []
    for path in SYSTEM:
        if os.path.islink(path):                      # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


# Set wherever students' code is graded: cells that grade nothing and cost seconds (chapter 7's demo loads
# SmolLM2) skip themselves.
GRADING_ENV = {"ATTNLAB_GRADING": "1"}


def run_uid() -> int:
    """A user id for one sandboxed run: the grading process's pid is unique among concurrent runs."""
    return UID_BASE + os.getpid() % UID_SPAN


def command(argv: list[str], work: Path, package: Path | None, uid: int = NOBODY) -> list[str]:
    """The bwrap command line that runs `argv` (a command inside the sandbox) with `work` at /tmp/sandbox/work."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-net",
            "--unshare-uts", "--unshare-cgroup-try", *_system_mounts(), "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp"]
    args += _python_mounts()
    args += ["--perms", "0755", "--dir", "/tmp/sandbox", "--bind", str(work), "/tmp/sandbox/work",
             "--ro-bind", str(RUNNER), "/tmp/sandbox/runner.py"]
    if package is not None:
        args += ["--ro-bind", str(package), "/tmp/sandbox/lib"]
    env = {"HOME": "/tmp/sandbox/work", "JUPYTER_RUNTIME_DIR": "/tmp/sandbox/work/.jupyter-runtime",
           "IPYTHONDIR": "/tmp/sandbox/work/.ipython", "MPLCONFIGDIR": "/tmp/sandbox/work/.matplotlib",
           "PYTHONPATH": "/tmp/sandbox/lib", "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE",
           "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
           "PYTHONDONTWRITEBYTECODE": "1", **GRADING_ENV}
    args += ["--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--chdir", "/tmp/sandbox/work", "--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
             "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", *argv]
    return args


def _limit(limits: Limits, group: MemoryGroup | None = None):
    def apply() -> None:
        if group is not None:
            group.join()
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run(argv: list[str], work: Path, package: Path | None, limits: Limits = Limits(), reported: bool = False,
        private_input: bytes | None = None, after_done_s: float = 0.0) -> Result:
    """Run `argv` in the sandbox; `work` becomes the writable /tmp/sandbox/work, owned by the run's user. All of
    its processes together hold at most submission_memory_bytes(): in a memory cgroup where one can be made,
    else under a watchdog that stops the largest process of the run's user (autograde/memory_group.py).

    reported: `argv` gets one more argument, the number of a file descriptor it may write JSON lines to
    (Result.report). The file lies outside the sandbox, and only the process given the descriptor holds it;
    sandbox_runner.py keeps it from the kernel it starts, so what arrives there comes from the runner, whatever
    the student's code does to the files of the work folder.

    private_input: bytes `argv` may read from one more descriptor, after the report's, that only it holds (the
    re-check's secret inputs). after_done_s: when the wall clock runs out after the runner reported {"done": true},
    it gets this much longer (for the re-check it runs after the notebook); stopped then, the result says
    cut_after_done, not timed_out."""
    uid = run_uid()
    os.chown(work, uid, uid)
    for path in work.rglob("*"):
        os.chown(path, uid, uid, follow_symlinks=False)
    total = submission_memory_bytes()
    group = MemoryGroup.create(f"autograde-{uid}-{os.getpid()}", total)
    # Output goes to a file, not a pipe: a flood must not fill the grader's memory (the file is capped
    # by the file-size limit), and only its tail is kept.
    with tempfile.TemporaryFile() as log, tempfile.TemporaryFile() as channel, tempfile.TemporaryFile() as given:
        passed = (channel.fileno(),) if reported else ()
        if private_input is not None:
            given.write(private_input)
            given.seek(0)
            passed += (given.fileno(),)
        proc = subprocess.Popen(command(argv + [str(fd) for fd in passed], work, package, uid), stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=_limit(limits, group), start_new_session=True,
                                pass_fds=passed)
        deadline, timed_out, extended, cut_after_done = time.monotonic() + limits.wall_s, False, False, False
        while True:
            try:
                proc.wait(timeout=WATCH_S)
                break
            except subprocess.TimeoutExpired:
                if group is None:
                    stop_largest_if_over(uid, total)
                if time.monotonic() > deadline:
                    if after_done_s > 0 and not extended and reported and \
                            any(entry.get("done") for entry in _report_lines(channel)):
                        deadline, extended = time.monotonic() + after_done_s, True
                        continue
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    timed_out, cut_after_done = not extended, extended
                    break
        if group is not None:           # bwrap's process namespace ends with it: the group empties by itself
            group.remove()
        log.seek(max(0, log.seek(0, os.SEEK_END) - 20000))
        output = log.read().decode(errors="replace")
        report = _report_lines(channel) if reported else []
    return Result(proc.returncode, output, timed_out, report, cut_after_done)


def _report_lines(channel) -> list[dict]:
    """The runner's JSON lines, the last REPORT_MAX_BYTES of them (what counts is the end); a line cut short
    (the runner killed while writing it) ends the list. Read without moving the file's offset, which the runner
    shares (a read while it runs must not make its next line overwrite an earlier one)."""
    import json
    fd = channel.fileno()
    start = max(0, os.fstat(fd).st_size - REPORT_MAX_BYTES)
    pieces = os.pread(fd, REPORT_MAX_BYTES, start).split(b"\n")
    if start > 0:
        pieces = pieces[1:]                           # the first line was cut by the window
    lines = []
    for line in pieces[:-1]:                          # the last piece has no newline: incomplete, or empty
        try:
            entry = json.loads(line)
        except ValueError:
            break
        if not isinstance(entry, dict):
            break
        lines.append(entry)
    return lines


def python(work: Path, package: Path | None, *args: str, limits: Limits = Limits(), reported: bool = False,
           private_input: bytes | None = None, after_done_s: float = 0.0) -> Result:
    """Run sandbox_runner.py with `args` in the sandbox (reported, private_input, after_done_s: see run())."""
    return run([sys.executable, "/tmp/sandbox/runner.py", *args], work, package, limits, reported, private_input,
               after_done_s)
