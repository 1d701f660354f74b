"""The memory watchdog's sum (used where no cgroup can be made) counts pages shared by forked processes once: the
sandbox's kernels and re-check are forked from one process holding torch, and summing each one's resident size
would count torch's pages again for every process, stopping an honest submission early."""
from __future__ import annotations

import os
import time

from autograde.memory_group import resident_bytes_by_pid

SIZE = 256 * 2**20


def test_pages_a_forked_child_shares_with_its_parent_are_counted_once():
    block = bytearray(os.urandom(1024)) * (SIZE // 1024)         # touched: resident in the parent
    alone = resident_bytes_by_pid(os.getuid())[os.getpid()]       # the block and whatever else this process holds
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        time.sleep(0.2)
        found = resident_bytes_by_pid(os.getuid())
        both = found[os.getpid()] + found[child]
        # counted per process, the child would add the block (and the rest) a second time
        assert both < alone + SIZE / 2, f"parent and child count {both >> 20} MiB, the parent alone {alone >> 20} MiB"
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)
    del block
