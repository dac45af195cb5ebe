"""Process helpers for tests of what a dead process leaves behind."""
from __future__ import annotations

import os


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped): nobody owns it now."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid
