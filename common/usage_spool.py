"""Usage records on disk until they are in SQL, so a gateway process killed outright (SIGKILL,
the OOM killer) loses none of the requests it already answered.

    spool = UsageSpool(Path(".inferplane/usage-spool"))
    spool.append(record)             # one write(2): in the kernel's hands once it returns
    sealed = spool.seal()            # the segment so far, closed; new records start another
    spool.release(sealed)            # its records are in SQL: the file goes
    for path, records in spool.adopt_orphans():   # segments of processes that died
        ...                          # written again, then spool.release([path])

    spool.hand_off()                 # a worker of `up`: the segment so far is for the writer
    for path, records, replayed in spool.collect():   # that writer: handed-off segments,
        ...                          # and the dead's (`replayed`: perhaps written already)

Segments are `<dir>/<pid>-<n>.jsonl`, one JSON record per line; a handed-off one is renamed
`<pid>-<n>.ready.jsonl`, and no process but the collecting writer takes it while its owner
lives. A process takes another's segment by renaming it to its own name first (one rename
wins), so two survivors never write the same records twice. A process killed between its SQL
commit and the unlink of the segment leaves records that are in SQL already: the writer hands
adopted records to its `replay_sink`, and the SQL one (control_plane.usage_sink) skips those
whose request-log row is there. A handed-off segment was never written by anyone: it goes to
the plain sink.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import orjson

from common.process_id import current_pid
from common.usage_record import RequestBodies, UsageRecord

log = logging.getLogger("gateway.usage")
_FIELDS = frozenset(f.name for f in dataclasses.fields(UsageRecord))
READY = ".ready.jsonl"   # a handed-off segment's suffix


class UsageSpool:
    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._serial = itertools.count()
        self._pid = os.getpid()
        self._path: Path | None = None
        self._fd: int | None = None

    def append(self, record: UsageRecord) -> None:
        if self._fd is None or self._pid != current_pid():   # first record, or a forked child
            self._open()
        os.write(self._fd, orjson.dumps(record) + b"\n")

    def seal(self) -> list[Path]:
        """Close the current segment (if any) and return it; the next append opens another."""
        if self._fd is None or self._pid != os.getpid():
            return []
        os.close(self._fd)
        sealed, self._fd, self._path = [self._path], None, None
        return sealed

    def hand_off(self) -> Path | None:
        """Close the current segment (if any) and mark it ready for the collecting writer."""
        sealed = self.seal()
        if not sealed:
            return None
        ready = sealed[0].with_name(sealed[0].name.removesuffix(".jsonl") + READY)
        os.rename(sealed[0], ready)
        return ready

    def release(self, paths: list[Path]) -> None:
        for path in paths:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def adopt_orphans(self) -> Iterator[tuple[Path, list[UsageRecord]]]:
        """Segments whose process is gone, renamed to this process and read back."""
        for mine, records, _ in self._claim(handed_off_too=False):
            yield mine, records

    def collect(self) -> Iterator[tuple[Path, list[UsageRecord], bool]]:
        """Segments other processes handed off (`replayed` False: never written) and those of
        processes that died (True), each renamed to this process and read back."""
        return self._claim(handed_off_too=True)

    def _claim(self, handed_off_too: bool) -> Iterator[tuple[Path, list[UsageRecord], bool]]:
        for path, owner in self._others():
            handed_off = handed_off_too and path.name.endswith(READY)
            if (handed_off or not _alive(owner)) and (mine := self._take(path)) is not None:
                yield mine, read_segment(mine), not handed_off

    def _others(self) -> Iterator[tuple[Path, int]]:
        for path in sorted(self.directory.glob("*.jsonl")):
            owner = _owner(path)
            if owner is not None and owner != os.getpid():
                yield path, owner

    def _take(self, path: Path) -> Path | None:
        mine = self.directory / f"{os.getpid()}-adopted-{next(self._serial)}.jsonl"
        try:
            path.rename(mine)
        except FileNotFoundError:   # another process took it first
            return None
        return mine

    def _open(self) -> None:
        self._pid = os.getpid()
        self._path = self.directory / f"{self._pid}-{next(self._serial)}.jsonl"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def read_segment(path: Path) -> list[UsageRecord]:
    """The records of one segment; a torn last line (the process died mid-write) is skipped."""
    records = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            records.append(_record(orjson.loads(line)))
        except (orjson.JSONDecodeError, TypeError, AttributeError):
            log.warning("usage spool %s line %d unreadable: skipped", path.name, number)
    return records


def _record(fields: dict) -> UsageRecord:
    """A record from its JSON line (fields this version does not know are left out)."""
    fields = {k: v for k, v in fields.items() if k in _FIELDS}
    if isinstance(fields.get("bodies"), dict):
        bodies = fields["bodies"]
        fields["bodies"] = RequestBodies(**{**bodies, "findings": tuple(
            bodies.get("findings") or ())})
    return UsageRecord(**fields)


def _owner(path: Path) -> int | None:
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process: alive
        return True
    return True


__all__ = ["UsageSpool", "read_segment"]
