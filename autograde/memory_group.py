"""One memory limit for all of a sandboxed run's processes together.

The sandbox's RLIMIT_AS bounds each process, not their sum: a submission that forks three processes of 4 GiB
holds 12 GiB of the machine. Where the grader may create a memory cgroup (cgroup v2, or v1's memory controller,
as root in a container), the run's processes go into one: past its limit the kernel's OOM killer stops the
largest of them, the grader notices a dead kernel or process, and grading goes on. Where it may not, a watchdog
in the grader sums the resident memory of the run's user (each run has a user id of its own) a few times a
second and kills the largest process itself.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

DEFAULT_GIB = 8.0
ENVIRONMENT = "AUTOGRADE_MEMORY_GIB"         # `python -m autograde ... --memory-limit GIB` sets it for its workers
V2_ROOT, V1_ROOT = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")


def submission_memory_bytes() -> int:
    """The memory one sandboxed run may hold, all its processes together: AUTOGRADE_MEMORY_GIB, or 8 GiB."""
    gib = float(os.environ.get(ENVIRONMENT, DEFAULT_GIB))
    if gib <= 0:
        raise ValueError(f"{ENVIRONMENT} must be a positive number of GiB, got {gib}")
    return int(gib * 2**30)


class MemoryGroup:
    """A memory cgroup holding one run: create() it, join() it from the child before exec, remove() it after."""

    def __init__(self, path: Path, procs: Path):
        self.path, self.procs = path, procs

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> "MemoryGroup | None":
        """A new group limited to limit_bytes (swap included where the kernel counts it), or None where cgroups
        cannot be written here."""
        if (V2_ROOT / "cgroup.controllers").is_file():
            if "memory" not in (V2_ROOT / "cgroup.subtree_control").read_text().split():
                return None
            limits = {"memory.max": limit_bytes, "memory.swap.max": 0}
        elif V1_ROOT.is_dir():
            limits = {"memory.limit_in_bytes": limit_bytes, "memory.memsw.limit_in_bytes": limit_bytes}
        else:
            return None
        path = (V2_ROOT if "memory.max" in limits else V1_ROOT) / name
        try:
            path.mkdir()
            for control, value in limits.items():
                if (path / control).exists():
                    (path / control).write_text(str(value))
        except OSError:
            cls(path, path / "cgroup.procs").remove()
            return None
        return cls(path, path / "cgroup.procs")

    def join(self) -> None:
        """Put the calling process (and so everything it starts) into the group."""
        self.procs.write_text(str(os.getpid()))

    def remove(self, wait_s: float = 5.0) -> None:
        """Delete the group once its processes have gone (killed by the caller); give up quietly after wait_s."""
        deadline = time.monotonic() + wait_s
        while self.path.exists():
            try:
                self.path.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)


def resident_bytes_by_pid(uid: int) -> dict[int, int]:
    """{pid: resident bytes} of every process of user `uid`, read from /proc: each process's proportional share
    (Pss) where the kernel gives it, so that pages shared by forked processes (the sandbox's kernels and re-check
    share torch with the process they are forked from) are counted once in the sum, as a cgroup counts them."""
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:                      # the process ended while it was read
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid and "VmRSS" in fields:
            found[int(status.parent.name)] = _proportional_bytes(status.parent) or int(fields["VmRSS"].split()[0]) * 1024
    return found


def _proportional_bytes(process: Path) -> int | None:
    try:
        for line in (process / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def stop_largest_if_over(uid: int, limit_bytes: int) -> int | None:
    """The watchdog's one look: when user `uid`'s processes hold more than limit_bytes together, SIGKILL the
    largest, as the OOM killer would. Returns the pid it stopped, or None."""
    resident = resident_bytes_by_pid(uid)
    if sum(resident.values()) <= limit_bytes:
        return None
    largest = max(resident, key=resident.get)
    try:
        os.kill(largest, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return largest
