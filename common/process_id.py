"""This process's id without a system call per read (glibc does not cache getpid, and the
metric values of gateway workers and the usage spool ask for it on every update).

    from common.process_id import current_pid
    current_pid()      # == os.getpid(), in a forked child too (refreshed by a fork hook)
"""
from __future__ import annotations

import os

_pid = os.getpid()


def current_pid() -> int:
    return _pid


def _refresh() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_refresh)

__all__ = ["current_pid"]
