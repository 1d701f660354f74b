"""Reading files that sandboxed code could have written: never follow a link, never read without a limit."""
from __future__ import annotations

import os
import stat
from pathlib import Path


class UntrustedFileError(ValueError):
    """The file is missing, not a regular file, a link, or too large."""


def read_bytes(path: Path, max_bytes: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise UntrustedFileError(f"{path.name} was not written") from None
    except OSError as exc:     # ELOOP: it is a symbolic link
        raise UntrustedFileError(f"{path.name} could not be opened safely ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{path.name} is not a regular file")
        if info.st_size > max_bytes:
            raise UntrustedFileError(f"{path.name} is {info.st_size} bytes, more than the {max_bytes} allowed")
        return handle.read(max_bytes + 1)[:max_bytes]
