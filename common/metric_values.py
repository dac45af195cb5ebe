"""Metric values of worker processes: prometheus_client's per-process files, cheaper to update.

    values.ValueClass = file_values()     # before the workers' metric families are made

Each value lives in this process's file of the shared metrics directory, where /metrics on
any worker reads every process's values back (prometheus_client.multiprocess), exactly as
prometheus_client's own MultiProcessValue keeps them: the same files, keys and layout. An
update writes its value to the file at once, as there, so a worker killed outright leaves
every count it made behind (the books of a crash still balance). What is cut is the work
around the write: prometheus_client's value calls three Python functions an update (its
fork check, the file's `write_value`, a packing helper) and looks the key's position up
every time; this one compares the cached process id (common.process_id) and packs into the
position it found once. A gateway request makes about a dozen updates.
"""
from __future__ import annotations

import os
import struct
import threading

from prometheus_client import values
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from common import process_id

_pack_two_doubles = struct.Struct("dd").pack_into   # the files' value, timestamp pair


def file_values() -> type:
    """A ValueClass whose values live in files of PROMETHEUS_MULTIPROC_DIR, one file per
    process and metric kind (a forked child starts its own files, as prometheus_client's do)."""
    files: dict[str, MmapedDict] = {}
    made: list = []
    lock = threading.Lock()     # updates come from the event loop and from threads
    owner = [process_id.current_pid()]

    def cleanup() -> None:
        for f in files.values():
            f.close()
        files.clear()
        made.clear()
    # prometheus_client closes every value class's files on its own reset (where the
    # release has one)
    getattr(values, "_multi_process_cleanups", []).append(cleanup)

    def after_fork() -> None:
        """This process's own files: a forked child starts from zero, as a new process."""
        owner[0] = process_id.current_pid()
        for f in files.values():
            f.close()
        files.clear()
        for value in made:
            value._open()

    def own_files() -> None:
        """After a fork, this process's files first (inlined in `inc`/`set`, the hot calls)."""
        if owner[0] != process_id._pid:
            after_fork()

    class FileValue:
        """A float in this process's metric file; `inc`/`set` write it through."""
        _multiprocess = True
        __slots__ = ("_params", "_file", "_pos", "_value", "_timestamp")

        def __init__(self, typ, metric_name, name, labelnames, labelvalues, help_text,
                     multiprocess_mode="", **kwargs):
            self._params = (typ, metric_name, name, labelnames, labelvalues, help_text,
                            multiprocess_mode)
            with lock:
                own_files()
                self._open()
                made.append(self)

        def _open(self) -> None:
            typ, metric_name, name, labelnames, labelvalues, help_text, mode = self._params
            prefix = f"{typ}_{mode}" if typ == "gauge" else typ
            file = files.get(prefix)
            if file is None:
                path = os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"],
                                    f"{prefix}_{owner[0]}.db")
                file = files[prefix] = MmapedDict(path)
            key = mmap_key(metric_name, name, labelnames, labelvalues, help_text)
            self._file = file
            self._value, self._timestamp = file.read_value(key)   # makes the key's entry
            self._pos = file._positions[key]

        def inc(self, amount: float) -> None:
            with lock:
                if owner[0] != process_id._pid:
                    after_fork()
                value = self._value = self._value + amount
                self._timestamp = 0.0
                _pack_two_doubles(self._file._m, self._pos, value, 0.0)

        def set(self, value: float, timestamp: float | None = None) -> None:
            with lock:
                if owner[0] != process_id._pid:
                    after_fork()
                self._value, self._timestamp = value, timestamp or 0.0
                _pack_two_doubles(self._file._m, self._pos, value, self._timestamp)

        def set_exemplar(self, exemplar) -> None:   # none in files (as prometheus_client)
            return

        def get(self) -> float:
            with lock:
                own_files()
                return self._value

        def get_exemplar(self):
            return None

        @classmethod
        def close_all_files(cls) -> None:
            with lock:
                cleanup()

    return FileValue


__all__ = ["file_values"]
