"""common.process_id: the cached id is this process's, and a forked child's own."""
from __future__ import annotations

import os

from common.process_id import current_pid


def test_the_cached_id_follows_a_fork():
    assert current_pid() == os.getpid()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, f"{current_pid()} {os.getpid()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    seen, real = os.read(read, 64).decode().split()
    os.close(read)
    assert int(seen) == int(real) == pid != current_pid()
