"""Runs INSIDE the sandbox, as an unprivileged user with no network and no view of the course files.

It imports nothing from this repository (only this file is mounted), so it can be read on its own:

    python sandbox_runner.py execute NOTEBOOK.ipynb OUT.ipynb CELL_TIMEOUT_S [REPORT_FD [PROBE_FD]]
        Run a notebook cell by cell in a fresh python3 kernel. A cell that runs past CELL_TIMEOUT_S is
        interrupted; one that ignores the interrupt (it catches KeyboardInterrupt, or sits in C code) is
        stopped GRACE_S later by killing the kernel. A cell that kills the kernel or has to be stopped is
        replaced by an error and the notebook rerun; each cell's output is capped. To REPORT_FD, a file
        only this process holds, go the digest of each OUT.ipynb written, the check of the kernel, and the end.
        With PROBE_FD (the grader's re-check: probes and secret inputs), the kernels are forked from a zygote
        that imported torch once, and after the end the re-check below runs here too, every process the
        notebook left killed first (recheck_here); its outcome goes to REPORT_FD.
    python sandbox_runner.py probe CODE.json INPUTS.safetensors OUT_DIR CELL_TIMEOUT_S
        In this plain process (no kernel, no IPython hooks), run the student's code cells, then each
        probe's code, and save each probe's `result` tensors for the trusted grader to compare. Each step
        is interrupted at CELL_TIMEOUT_S; a watchdog process kills the runner GRACE_S later if the step
        ignores that, and writes which step it was to OUT_DIR/stuck.json.

Whatever the student's code does here can only change what this process writes: the comparison with
the reference happens outside, in the trusted grader.
"""
from __future__ import annotations

import copy
import json
import re
import sys
import traceback

MAX_OUTPUT_CHARS_PER_CELL = 100_000
MAX_RERUNS = 3          # a kernel that keeps dying (say, from a timer) is not rerun forever
GRACE_S = 5             # how long a cell may ignore its interrupt before it is stopped by force
KERNEL_DIED = "KernelDied"
CELL_TIMEOUT = "CellTimeout"    # ran past the limit and was interrupted: the notebook went on
CELL_STOPPED = "CellStopped"    # ran past the limit, ignored the interrupt, and was stopped by killing the kernel
REAL_VALUE_ERROR = ValueError   # taken before any student code runs: the probes' refusals check for this class


def execute(notebook_path: str, out_path: str, cell_timeout_s: str, report_fd: str = "", probe_fd: str = "") -> None:
    import asyncio
    import os
    import signal

    report = private_channel(int(report_fd)) if report_fd else (lambda **entry: None)
    # Forked before the re-check's inputs are read below: nothing it holds, or hands on to a kernel, is secret.
    zygote = Zygote.start(notebook_path) if probe_fd and in_sandbox() else None
    spec = read_probe_spec(int(probe_fd)) if probe_fd else None

    # Skip a 1.4 s import that nbformat's jsonschema makes for a format no notebook uses (autograde/__init__.py).
    sys.modules.setdefault("rfc3987_syntax", None)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    timeout = int(cell_timeout_s)

    class CappedClient(NotebookClient):
        """Keeps at most MAX_OUTPUT_CHARS_PER_CELL characters of each cell's output (an output flood), and
        stops a cell that ignores the interrupt sent at its timeout."""

        def output(self, outs, msg, display_id, cell_index):
            # Capped as each message arrives, before it joins the notebook, so that nothing larger than the cap
            # is ever kept or written: one print of 100 MB must not make out.ipynb unreadable.
            if msg["header"]["msg_type"] == "error":
                # An error always counts, however much the cell printed before it: dropping it would turn
                # a failed test into a pass. Only its text is shortened.
                return super().output(outs, capped_error(msg), display_id, cell_index)
            if cell_index in self.capped:
                return None
            room = MAX_OUTPUT_CHARS_PER_CELL - sum(len(json.dumps(o)) for o in outs)
            kept = fitted(msg, room)
            if kept is not msg:
                self.capped.add(cell_index)
                if kept is not None:
                    super().output(outs, kept, display_id, cell_index)
                outs.append(nbformat.v4.new_output("stream", name="stdout", text="\n[output capped by the grader]\n"))
                return None
            return super().output(outs, msg, display_id, cell_index)

        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            self.running_index = cell_index      # the cell to blame if the kernel dies
            # nbclient interrupts the kernel at the timeout, then waits for as long again, and again: a cell
            # that swallows KeyboardInterrupt would hold the notebook until the submission's wall clock.
            # A timer on the client's own event loop, not a thread: a fork bomb in the notebook can use up
            # the processes (and threads) its user may have, and this runner runs as that user.
            watchdog = asyncio.get_running_loop().call_later(timeout + GRACE_S, self.stop_stuck_cell, cell_index)
            self.running_task = asyncio.current_task()
            try:
                return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            except asyncio.CancelledError:
                if self.stuck != cell_index:
                    raise
                # Cancelled by stop_stuck_cell: report the dead kernel now, so the notebook is rerun at once.
                self.running_task.uncancel()
                raise DeadKernelError(f"cell {cell_index} ignored its interrupt and was stopped") from None
            finally:
                watchdog.cancel()

        async def _async_handle_timeout(self, timeout, cell=None):
            self.interrupted.add(self.running_index)
            return await super()._async_handle_timeout(timeout, cell)

        def stop_stuck_cell(self, cell_index: int) -> None:
            if self.running_index == cell_index and self.km is not None and self.km.provisioner is not None:
                self.stuck = cell_index
                pid = getattr(self.km.provisioner, "pid", None)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                # nbclient stops watching the kernel's health once it has sent the interrupt, and waits a whole
                # timeout more for the reply before it notices the kernel is gone: stop that wait now.
                self.running_task.cancel()

    import time
    timings = {"runner_start": time.time(), "runs": []}    # for `make bench`: where a submission's time goes
    original = nbformat.read(notebook_path, as_version=4)
    skipped: dict[int, str] = {}     # cell index -> why it is replaced: KERNEL_DIED or CELL_STOPPED

    def mark_skipped(nb):
        """The notebook as written out: each skipped cell with its own source and the grader's reason, so
        that the re-check, which reads these names, leaves the same cells out; the grader's check of the kernel,
        run after the last cell, is not part of it."""
        nb = copy.deepcopy(nb)
        nb.cells = nb.cells[:len(original.cells)]
        for index, why in skipped.items():
            if 0 <= index < len(nb.cells):
                nb.cells[index].source = original.cells[index].source
                message = ("the kernel died while this cell ran; it was skipped when grading" if why == KERNEL_DIED
                           else f"this cell ran past the {timeout} s limit and ignored the interrupt; it was "
                           "stopped and skipped when grading")
                nb.cells[index].outputs = [nbformat.v4.new_output("error", ename=why, evalue=message,
                                                                  traceback=[f"{why}: {message}"])]
        return nb
    import secrets
    nonce = secrets.token_hex(16)           # chosen now: the submission's code, run before, cannot know it
    while True:
        trial = copy.deepcopy(original)
        for index, why in skipped.items():
            trial.cells[index].source = f"raise RuntimeError('cell {index} was skipped when grading ({why})')"
        trial.cells.append(nbformat.v4.new_code_cell(KERNEL_CHECK.replace("NONCE", nonce)))
        client = CappedClient(trial, timeout=timeout, interrupt_on_timeout=True, allow_errors=True,
                              kernel_name="python3", record_timing=False, kernel_manager_class=kernel_manager(zygote),
                              # the sandbox is torn down next: waiting for a polite shutdown costs a second a run
                              shutdown_kernel="immediate")
        client.running_index, client.stuck, client.interrupted, client.capped = None, None, set(), set()
        client.running_task = None
        run = {"start": time.time(), "cells": {}}
        timings["runs"].append(run)

        def executed(cell_index, **_):
            # Written after every cell, so that a run stopped from outside still shows what it did.
            run["cells"][cell_index] = time.time()
            save(mark_skipped(client.nb), out_path, report)
        client.on_cell_executed = executed
        client.on_notebook_start = lambda **_: run.update(kernel_ready=time.time())
        try:
            client.execute()
        except DeadKernelError:
            index = client.running_index
            if index is None or index in skipped or len(skipped) >= MAX_RERUNS:
                # out.ipynb holds what ran (the grader marks the rest as not run); say which cell was the last
                skipped[index if index is not None else -1] = CELL_STOPPED if client.stuck == index else KERNEL_DIED
                # The grader's check of the kernel, after the last cell, has not run: the grader says so.
                save(mark_skipped(client.nb), out_path, report)
                report(done=True)
                return
            skipped[index] = CELL_STOPPED if client.stuck == index else KERNEL_DIED
            continue
        break
    timings["end"] = time.time()
    # Reported first: nothing the notebook left behind in the work folder (a directory in the way of a file
    # written below, say) can stop the check's answer from reaching the grader.
    report(kernel=kernel_changes(trial.cells[-1], nonce))
    for index in client.interrupted:
        # The cell's own KeyboardInterrupt says nothing a student can act on: say that the grader stopped it, and
        # where, for the re-check, which runs the cell's statements before that line, as far as the notebook got.
        line = interrupted_line(trial.cells[index])
        where = f" at line {line}" if line else ""
        trial.cells[index].outputs = [o for o in trial.cells[index].outputs if o.get("output_type") != "error"] + [
            nbformat.v4.new_output("error", ename=CELL_TIMEOUT, evalue=f"this cell ran past the {timeout} s limit "
                                   f"and was interrupted{where}", traceback=[f"{CELL_TIMEOUT}: interrupted at "
                                                                             f"{timeout} s{where}"])]
    save(mark_skipped(trial), out_path, report)
    try:
        with open(out_path + ".timings.json", "w", encoding="utf-8") as handle:
            json.dump(timings, handle)
    except OSError:          # a benchmark's figures (make bench), never part of a grade
        pass
    report(done=True)
    if zygote is not None and spec is not None:
        try:
            report(probe=recheck_here(zygote, spec, original, trial, mark_skipped(trial), timeout))
        except Exception as error:  # noqa: BLE001 - the grader then re-checks in a sandbox of its own
            report(probe={"failed": f"{type(error).__name__}: {error}"[:300]})


def private_channel(fd: int):
    """report(**entry): one JSON line to `fd`, the grader's file outside the sandbox.

    The kernel runs as this process's user, so it could otherwise reach the descriptor through /proc/<pid>/fd
    or attach to this process and write the lines itself: a process that is not dumpable is closed to both.
    The descriptor is also kept out of every process this one starts."""
    import ctypes
    import os
    os.set_inheritable(fd, False)
    PR_SET_DUMPABLE = 4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")

    def report(**entry) -> None:
        os.write(fd, json.dumps(entry).encode() + b"\n")
    return report


def save(nb, out_path: str, report) -> None:
    """Write the executed notebook and report the digest of its bytes: the grader takes OUT.ipynb only as this
    process wrote it, not as a process the notebook left running may have rewritten it.

    Reported before the file is swapped in, whole: the grader's wall clock may stop this process at any line, and
    OUT.ipynb is then always one of the notebooks reported, never a half-written one or one not yet reported."""
    import hashlib
    import os

    import nbformat
    data = nbformat.writes(nb).encode("utf-8")
    part = out_path + ".part"
    # A new file, never one the notebook planted there: a link at PART would send these bytes elsewhere.
    if os.path.lexists(part):
        os.unlink(part)
    with os.fdopen(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as handle:
        handle.write(data)
    report(notebook=hashlib.sha256(data).hexdigest())
    os.replace(part, out_path)


def in_sandbox() -> bool:
    """Whether this runs in the grader's sandbox: a process namespace of its own, whose first process is bwrap, and a
    user other than root. Only there may stop_other_processes() stop "every other process of this user"."""
    import os
    try:
        with open("/proc/1/comm", encoding="utf-8") as handle:
            return handle.read().strip() == "bwrap" and os.geteuid() != 0
    except OSError:
        return False


def read_probe_spec(fd: int) -> dict | None:
    """The re-check the grader hands over on its own descriptor (sandbox.run's probe_spec): one JSON line
    ({"probes": {test cell: probe code}, "budget_s": seconds}), then the inputs, a safetensors file's bytes."""
    import os
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    header, _, inputs = b"".join(chunks).partition(b"\n")
    try:
        spec = json.loads(header)
    except ValueError:
        return None
    return {**spec, "inputs": inputs} if isinstance(spec, dict) else None


# What the zygote imports once, for every kernel and the re-check forked from it: torch alone is most of the
# start of a kernel's first cell, and of a re-check.
ZYGOTE_PRELOAD = ("torch", "safetensors.torch", "ipykernel.kernelapp")
# Imported there too where the notebook's cells import them at their top level: transformers' model code costs as much
# as torch (2.4 s of CPU for chapter 7's Llama), which the kernel and the re-check would each pay again. Only these
# installed packages: the zygote runs no module the submission could have written.
ZYGOTE_PRELOAD_IF_IMPORTED = ("transformers",)
ZYGOTE_READY_S = 300        # its imports, on a loaded machine
ZYGOTE_REPLY_S = 10         # a fork, once it is ready: longer means it was stopped (by the notebook's code, say)


class Zygote:
    """A child of this runner that imports torch and IPython's kernel once, before any student code runs. The
    notebook's kernels, and the re-check after the last cell, are forked from it instead of starting a new
    interpreter that imports them again: about 2 s of CPU per graded submission.

    It holds nothing secret (it is forked before the re-check's inputs are read), and it is not dumpable (it
    inherits that from this runner), so the kernel can neither attach to it nor reach its pipes. The kernel can
    still stop or kill it, as it can kill this runner: kernels are then started the ordinary way, and the
    grader re-checks the notebook in a sandbox of its own."""

    def __init__(self, pid: int, requests: int, replies: int):
        self.pid, self.requests, self.replies, self.buffer, self.alive = pid, requests, replies, b"", True
        self.ready = False

    @classmethod
    def start(cls, notebook_path: str) -> "Zygote | None":
        import os
        imports = notebook_imports(notebook_path, ZYGOTE_PRELOAD_IF_IMPORTED)
        to_zygote, from_runner = os.pipe()[::-1]
        from_zygote, to_runner = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:
            os.close(to_zygote)
            os.close(from_zygote)
            _zygote(from_runner, to_runner, imports)          # never returns
        os.close(from_runner)
        os.close(to_runner)
        return cls(pid, to_zygote, from_zygote)

    def ask(self, request: dict) -> dict | None:
        """Send `request`, return the zygote's reply, or None (and never ask again) if it is gone or stopped."""
        import os
        if not self.alive:
            return None
        try:
            if not self.ready:
                self.ready = self._read(ZYGOTE_READY_S) == {"ready": True}
                if not self.ready:
                    raise OSError("the zygote did not get ready")
            os.write(self.requests, json.dumps(request).encode() + b"\n")
            reply = self._read(ZYGOTE_REPLY_S)
            if reply is None or "error" in reply:
                raise OSError(str(reply))
            return reply
        except OSError:
            self.stop()
            return None

    def wait_status(self, timeout_s: float) -> int | None:
        """The exit status of the process the last request forked, as the zygote reports it when it ends."""
        reply = self._read(timeout_s)
        return reply.get("status") if isinstance(reply, dict) else None

    def _read(self, timeout_s: float) -> dict | None:
        import os
        import select
        import time
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                return None
            chunk = os.read(self.replies, 4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> None:
        import os
        import signal
        self.alive = False
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass


def fd_ceiling() -> int:
    """One past the highest descriptor this process can hold: a forked kernel, unlike an exec'd one, keeps every
    descriptor it is not made to close, close-on-exec or not, so all must go, not only those below a round number."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY or hard > 1 << 20 else hard


def top_level_imports(sources: list[str], packages: tuple[str, ...] | None = None) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) for each `import module` or `from module import names` at the top level of
    `sources` (one package of `packages`, if given). A source that does not parse (a magic, a syntax error)
    imports nothing here: the kernel imports what it imports."""
    import ast
    found: list[tuple[str, list[str]]] = []
    for source in sources:
        try:
            body = ast.parse(source).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in body:
            if isinstance(node, ast.Import):
                found += [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.module, [alias.name for alias in node.names]))
    return [(module, names) for module, names in found if packages is None or module.split(".")[0] in packages]


def notebook_imports(notebook_path: str, packages: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """top_level_imports of the notebook's code cells, read as plain JSON (nothing of the notebook is run)."""
    try:
        with open(notebook_path, encoding="utf-8") as file:
            cells = json.load(file).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return []
    sources = []
    for cell in cells if isinstance(cells, list) else []:
        source = cell.get("source") if isinstance(cell, dict) and cell.get("cell_type") == "code" else None
        source = "".join(source) if isinstance(source, list) and all(isinstance(s, str) for s in source) else source
        if isinstance(source, str):
            sources.append(source)
    return top_level_imports(sources, packages)


def _preload(imports: list[tuple[str, list[str]]]) -> None:
    """Import what notebook_imports found, as the kernel would: `from transformers import X` loads X's module."""
    import importlib
    for module, names in imports:
        try:
            loaded = importlib.import_module(module)
            for name in names:
                getattr(loaded, name, None)
        except Exception:  # noqa: BLE001 - the kernel meets the same error in its own cell, where it belongs
            pass


def _zygote(requests: int, replies: int, imports: list[tuple[str, list[str]]]) -> None:
    """The zygote's loop: {"kernel": argv, "env", "cwd"} forks a kernel and replies its pid; {"probe": folder,
    "timeout"} forks the re-check, replies its pid, then its exit status when it ends."""
    import importlib
    import os
    import signal
    keep = sorted({requests, replies})
    os.closerange(3, keep[0])                       # the grader's report and the re-check's inputs among them
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, fd_ceiling())
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # a kernel that ends is reaped at once: no zombie, so poll() sees it
    kernel_path = [p for p in sys.path if p != sys.path[0]]    # sys.path[0] is this file's folder: a kernel's is not
    for name in ZYGOTE_PRELOAD:
        importlib.import_module(name)
    _preload(imports)
    reply = lambda **entry: os.write(replies, json.dumps(entry).encode() + b"\n")   # noqa: E731
    reply(ready=True)
    with os.fdopen(requests, "rb") as incoming:
        for line in incoming:
            request = json.loads(line)
            probing = "probe" in request
            if probing:            # its status is waited for here, so it must not be reaped by the kernel
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                pid = os.fork()
            except OSError as error:
                reply(error=str(error))
                continue
            if pid == 0:
                _forked(request, kernel_path)                 # never returns
            reply(pid=pid)
            if probing:
                _, status = os.waitpid(pid, 0)
                reply(status=os.waitstatus_to_exitcode(status))
                signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    os._exit(0)


def _forked(request: dict, kernel_path: list[str]) -> None:
    """In a process just forked from the zygote: become what a new process of its kind would be, then run it."""
    import ctypes
    import os
    import signal
    status = 1
    try:
        os.setsid()                                   # as the kernel launcher starts it: interrupts reach its group
        os.closerange(3, fd_ceiling())
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)        # PR_SET_DUMPABLE: as after exec, the student's process is dumpable
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if "kernel" in request:
            import ipykernel_launcher
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            # No watch on its parent (ipykernel would end the kernel when the zygote, its parent here, ended): the
            # sandbox ends the kernel when this runner ends. "1" also keeps ipykernel from printing its console banner.
            sys.argv = [ipykernel_launcher.__file__, *request["kernel"][3:], "--IPKernelApp.parent_handle=1"]
            sys.path[:] = kernel_path
            from ipykernel import kernelapp
            kernelapp.launch_new_instance()
            status = 0
        else:
            os.chdir(request["probe"])
            probe("code.json", "inputs.safetensors", ".", str(request["timeout"]))
            status = 0
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever happens, this process must end here, not in the zygote's loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def kernel_manager(zygote: "Zygote | None"):
    """nbclient's kernel manager, whose kernels are forked from `zygote` while it answers (else started as usual)."""
    import os
    import signal
    from jupyter_client.manager import AsyncKernelManager

    class Forked:
        """The part of subprocess.Popen that jupyter_client's provisioner uses, for a kernel forked by the zygote."""

        def __init__(self, pid: int):
            self.pid, self.returncode, self.stdin, self.stdout, self.stderr = pid, None, None, None, None

        def poll(self) -> int | None:
            if self.returncode is None:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:          # the zygote reaped it (or, the zygote gone, the sandbox's init)
                    self.returncode = -signal.SIGKILL
                except PermissionError:
                    pass
            return self.returncode

        def wait(self, timeout: float | None = None) -> int:
            import time
            while self.poll() is None:
                time.sleep(0.02)
            return self.returncode

        def send_signal(self, signum: int) -> None:
            os.kill(self.pid, signum)

        def kill(self) -> None:
            self.send_signal(signal.SIGKILL)

        def terminate(self) -> None:
            self.send_signal(signal.SIGTERM)

    class ForkingKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw):
            env = {**(kw.get("env") or os.environ), "JPY_PARENT_PID": str(os.getpid())}    # as the launcher sets it
            forked = zygote.ask({"kernel": kernel_cmd, "env": env,
                                 "cwd": str(kw.get("cwd") or os.getcwd())}) \
                if zygote is not None and kernel_cmd[1:3] == ["-m", "ipykernel_launcher"] else None
            if forked is None:
                return await super()._async_launch_kernel(kernel_cmd, **kw)
            provisioner = self.provisioner
            provisioner.process = Forked(forked["pid"])
            provisioner.pid = provisioner.pgid = forked["pid"]      # a session of its own, as the launcher's
            provisioner.cwd = kw.get("cwd")
            self._reconcile_connection_info(provisioner.connection_info)

    return ForkingKernelManager


def stop_other_processes(keep: set[int]) -> None:
    """SIGKILL every process of the sandbox but this one, `keep` and the sandbox's init. All are stopped first, at
    once: kill(-1) reaches every process this user may signal in one step, and a stopped process cannot fork, so
    none escapes by forking while the others are killed one by one."""
    import os
    import signal
    try:
        os.kill(-1, signal.SIGSTOP)
    except ProcessLookupError:           # no other process
        pass
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep | {os.getpid(), 1}:
            try:
                os.kill(int(name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in keep:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


MAGIC_LINE = ("%", "!")     # IPython-only lines, which the re-check's plain Python leaves out
CELL_IN = re.compile(r"Cell In\[(\d+)\], line (\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def interrupted_line(cell) -> int | None:
    """The line of `cell` its KeyboardInterrupt stopped, from IPython's traceback: the first frame in this cell
    (`Cell In[n], line L`, n its execution count) is the top-level statement that was running."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error" and output.get("ename") == "KeyboardInterrupt":
            for frame in output.get("traceback", []):
                found = CELL_IN.search(ANSI.sub("", str(frame)))
                if found and int(found.group(1)) == cell.get("execution_count"):
                    return int(found.group(2))
    return None


def statements_before(source: str, line: int) -> str:
    """The top-level statements of `source` that end before the statement holding `line` ("" if it does not parse)."""
    import ast
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    for node in body:
        if node.end_lineno >= line:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            return "\n".join(source.splitlines()[:start - 1])
    return source


TIMED_OUT_AT = re.compile(r"interrupted at line (\d+)$")


def recheck_source(cell) -> str:
    """What the re-check runs of one student cell: what the notebook's run ran of it.

    IPython-only lines (%magic, !shell) are blanked, keeping the line numbers. A cell the run skipped (it killed the
    kernel, or ignored its interrupt and was stopped) is left out. A cell interrupted at its time limit runs only
    its statements before the one that was interrupted: they ran in the notebook, and a function defined before the
    slow line keeps its points; the slow statement itself is never run a second time. Nothing in the cell's text or
    outputs can make the re-check run more than the cell's own code."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    names = {str(o.get("ename")) for o in errors}
    if names & {KERNEL_DIED, CELL_STOPPED}:
        return ""
    code = "\n".join("" if line.lstrip().startswith(MAGIC_LINE) else line for line in cell.source.splitlines())
    if CELL_TIMEOUT in names:
        found = next((TIMED_OUT_AT.search(str(o.get("evalue", ""))) for o in errors if o.get("ename") == CELL_TIMEOUT),
                     None)
        return statements_before(code, int(found.group(1))) if found else ""
    return code


def recheck_cells(notebook) -> list[str]:
    """recheck_source of every code cell that is not a test, in order: what the re-check runs before its probes."""
    return [recheck_source(cell) for cell in notebook.cells
            if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("grade")]


def recheck_here(zygote: "Zygote", spec: dict, original, trial, notebook_as_run, timeout: int) -> dict:
    """The grader's re-check (autograde/recheck.py), run here after the last cell instead of in a sandbox of its
    own: the student's non-test cells, then the probe of each test cell that passed, in a process forked from the
    zygote, after every process the notebook left is killed. It writes its results in a new folder of a random
    name; the grader takes them only if this reports a clean end (otherwise it re-checks as before)."""
    import hashlib
    import os
    import secrets
    passed = {cell.metadata["nbgrader"]["grade_id"] for index, cell in enumerate(trial.cells[:len(original.cells)])
              if original.cells[index].metadata.get("nbgrader", {}).get("grade") and cell.get("execution_count")
              and not any(o.get("output_type") == "error" for o in cell.get("outputs", []))}
    probes = {name: code for name, code in spec.get("probes", {}).items() if name in passed}
    cells = recheck_cells(notebook_as_run)
    stop_other_processes({zygote.pid})
    folder = f".probe-{secrets.token_hex(8)}"
    os.mkdir(folder, 0o700)
    for name, data in (("code.json", json.dumps({"cells": cells, "probes": probes}).encode()),
                       ("inputs.safetensors", spec["inputs"])):
        with os.fdopen(os.open(f"{folder}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
            out.write(data)
    started = zygote.ask({"probe": os.path.abspath(folder), "timeout": timeout})
    status = None
    if started is not None:
        status = zygote.wait_status(float(spec.get("budget_s", 60)))
        if status is None:                 # past its budget: the grader re-checks with its own, longer one
            stop_other_processes({zygote.pid})
    stop_other_processes(set())            # what the student's code left running, and the zygote
    digest = hashlib.sha256(json.dumps(cells).encode()).hexdigest()
    return {"folder": folder, "ran": sorted(probes), "status": status, "cells": digest}


# Run in the student's kernel after their last cell: what in it changes how IPython runs cells or reports their
# errors. Each of these can forge a test's pass in the kernel (a handler that swallows the AssertionError, a
# transformer that blanks the test's code), so the grader flags any of them, whatever the scores.
KERNEL_CHECK = """
import json as _grader_json, sys as _grader_sys
def _grader_kernel_changes():
    ip, found = get_ipython(), []
    # installed code, not the notebook's: a function's code must come from a file of the Python environment
    # (a cell's functions come from /tmp/ipykernel_*/), or a built-in
    library = tuple({_grader_sys.prefix, _grader_sys.base_prefix, _grader_sys.exec_prefix})
    def mine(f):
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None) or getattr(getattr(type(f), "__call__", None), "__code__", None)
        return code.co_filename.startswith(library) if code is not None else type(f).__module__ == "builtins"
    if ip.custom_exceptions:
        found.append("a custom exception handler (set_custom_exc)")
    for name in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
        if not all(mine(t) for t in getattr(ip, name, [])):
            found.append(f"an entry of {name}")
    for event, callbacks in ip.events.callbacks.items():
        if not all(mine(c) for c in callbacks):
            found.append(f"a callback of the {event} event")
    for name in ("run_cell", "run_cell_async", "run_ast_nodes", "run_code", "showtraceback", "_showtraceback",
                 "transform_cell", "should_run_async"):
        if not mine(vars(ip).get(name, getattr(type(ip), name, None))):
            found.append(f"IPython's {name}")
    if _grader_sys.gettrace() is not None or _grader_sys.getprofile() is not None:
        found.append("a trace or profile function (sys.settrace, sys.setprofile)")
    return found
print("NONCE" + _grader_json.dumps(_grader_kernel_changes()))
"""


def kernel_changes(cell, nonce: str) -> list[str]:
    """What KERNEL_CHECK found in the kernel, or why it could not tell: its answer missing means the cell's
    code or output was intercepted (or the notebook was stopped before it, which is not counted)."""
    if cell.get("execution_count") is None:
        return []
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    for line in text.splitlines():
        if line.startswith(nonce):
            try:
                return [str(item)[:200] for item in json.loads(line[len(nonce):])][:20]
            except ValueError:
                break
    return ["the kernel did not give the grader's check after the last cell its answer: the cell's code or its "
            "output was intercepted"]


def fitted(msg: dict, room: int) -> dict | None:
    """msg if its content fits in `room` characters of JSON; else a copy of a stream message with its text cut to
    fit, or None for any other output (an image, a repr) that does not fit whole."""
    size = len(json.dumps(msg.get("content", {})))
    if size <= room:
        return msg
    if msg["header"]["msg_type"] != "stream" or room <= 200:
        return None
    content = dict(msg["content"])
    content["text"] = content.get("text", "")[:room - 200]
    return {**msg, "content": content}


def capped_error(msg: dict, limit: int = 10_000) -> dict:
    """An error message with its value and traceback cut to `limit` characters each: the error itself is kept."""
    content = dict(msg.get("content", {}))
    content["evalue"] = str(content.get("evalue", ""))[:limit]
    traceback_lines, total = [], 0
    for line in content.get("traceback", []) or []:
        line = str(line)[:limit]
        if total + len(line) > limit:
            traceback_lines.append("[traceback cut by the grader]")
            break
        traceback_lines.append(line)
        total += len(line)
    content["traceback"] = traceback_lines
    return {**msg, "content": content}


def _watchdog(limit_s: float, out_dir: str):
    """Fork a process that kills this one when a step runs past `limit_s`; returns report(step) / done().

    A signal alarm interrupts Python code, but a step that catches KeyboardInterrupt, or sits in C code
    holding the interpreter lock, never sees it; a separate process still can stop it.
    """
    import os
    import select
    import signal
    import time

    read_end, write_end = os.pipe()
    parent = os.getpid()
    if os.fork() == 0:                       # the watchdog: no student code ever runs in this process
        os.close(write_end)
        step, started, buffer = None, 0.0, b""
        while True:
            wait = None if step is None else max(0.0, started + limit_s - time.monotonic())
            ready, _, _ = select.select([read_end], [], [], wait)
            if not ready:
                with open(f"{out_dir}/stuck.json", "w", encoding="utf-8") as handle:
                    json.dump({"stuck": step}, handle)
                os.kill(parent, signal.SIGKILL)
                os._exit(0)
            chunk = os.read(read_end, 4096)
            if not chunk:                        # the runner has ended
                os._exit(0)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                step = json.loads(line) if line != b"null" else None
                started = time.monotonic()
    os.close(read_end)

    def report(step) -> None:
        try:
            os.write(write_end, json.dumps(step).encode() + b"\n")
        except OSError:          # the watchdog is gone (killed by the student's code): the wall clock remains
            pass
    return report


def probe(code_path: str, inputs_path: str, out_dir: str, cell_timeout_s: str = "60") -> None:
    import signal

    timeout = int(cell_timeout_s)
    running = _watchdog(timeout + GRACE_S, out_dir)      # before torch starts its threads

    import torch
    from safetensors.torch import load_file, save_file

    def interrupt(signum, frame):
        raise KeyboardInterrupt("cell timed out")      # what the notebook run does to a cell that runs too long

    signal.signal(signal.SIGALRM, interrupt)

    spec = json.load(open(code_path, encoding="utf-8"))
    inputs = load_file(inputs_path)
    # The student's cells run as a module of their own, as a kernel runs them in __main__: registered in
    # sys.modules (dataclasses and pickle look a class's module up there), and compiled with dont_inherit so
    # that this file's `from __future__ import annotations` does not turn their annotations into strings.
    import types
    module = types.ModuleType("__student__")
    sys.modules["__student__"] = module
    namespace: dict = module.__dict__
    cell_errors = []
    import linecache
    for index, source in enumerate(spec["cells"]):
        running(index)
        signal.alarm(timeout)
        # Registered as IPython registers a cell, so that inspect.getsource finds the cell's functions: Triton
        # reads a kernel's source to run it (chapter 10).
        filename = f"<student cell {index}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        try:
            exec(compile(source, filename, "exec", dont_inherit=True), namespace)
        except BaseException as exc:  # noqa: BLE001 - a student cell may raise anything, SystemExit included
            cell_errors.append(f"cell {index}: {type(exc).__name__}: {exc}"[:300])
        finally:
            signal.alarm(0)
    report = {"cell_errors": cell_errors, "probes": {}}
    for name, code in spec["probes"].items():
        scope = dict(namespace)
        scope["inputs"] = {k: v.clone() for k, v in inputs.items() if k.startswith(name + ".")}
        scope["inputs"] = {k[len(name) + 1:]: v for k, v in scope["inputs"].items()}
        scope["__ValueError__"] = REAL_VALUE_ERROR
        running(name)
        signal.alarm(timeout)
        try:
            exec(compile(code, f"<probe {name}>", "exec", dont_inherit=True), scope)
            result = scope["result"]
            tensors = {f"{i}": torch.Tensor.as_subclass(torch.as_tensor(t), torch.Tensor).detach().clone().contiguous()
                       for i, t in enumerate(result if isinstance(result, (tuple, list)) else [result])}
            save_file(tensors, f"{out_dir}/{name}.safetensors")
            report["probes"][name] = "ok"
        except BaseException as exc:  # noqa: BLE001
            report["probes"][name] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            signal.alarm(0)
    running(None)
    with open(f"{out_dir}/report.json", "w", encoding="utf-8") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    import os
    command, *args = sys.argv[1:]
    status = 0
    try:
        {"execute": execute, "probe": probe}[command](*args)
    except Exception as error:
        traceback.print_exc()
        status = 1
        if command == "execute" and len(args) >= 4 and args[3]:      # the grader hears why the run ended early
            os.write(int(args[3]), json.dumps({"error": f"{type(error).__name__}: {error}"[:300]}).encode() + b"\n")
    # Everything is written: end now. A probe run has executed the student's code in this process, and a thread
    # it started or an atexit hook it registered must not hold the runner until the wall clock stops it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
