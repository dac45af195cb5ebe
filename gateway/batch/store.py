"""Files, batches and per-line results in the registry database, shared by every gateway
process (replicas and `up --workers`). Off the chat hot path; each call runs its session in a
worker thread so the event loop never waits on the database:

    store = BatchStore(sessions)                    # registry.db.make_session_factory(url)
    row = await store.add_file(owner, "batch", "in.jsonl", content)
    row = await store.get_file(file_id, owner)      # None: missing or another tenant's
    batch = await store.add_batch(Batch(...))
    claimed = await store.claim(batch_id, runner_id, lease_s)   # True: this runner holds it
    kept = await store.save_result(batch_id, runner_id, line, ok, record)  # False: lease lost

A runner holds a batch while `claimed_by` is its id and `lease_expires_at` is ahead; every
write a runner makes is conditional on still holding it, so a runner whose lease lapsed (and
another took the batch over) changes nothing. A line's result and the batch's counts change
in one transaction, and (batch_id, line) is unique: each line is counted and written once.
"""
from __future__ import annotations

import asyncio
import functools
import time

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from registry.orm.batches import ACTIVE_BATCH_STATUSES, Batch, BatchResult, StoredFile


def _threaded(method):
    """The sync `method` run in a worker thread, awaited."""
    @functools.wraps(method)
    async def run(self, *args, **kwargs):
        return await asyncio.to_thread(method, self, *args, **kwargs)
    return run


class BatchStore:
    def __init__(self, sessions: sessionmaker[Session], clock=time.time):
        self.sessions = sessions
        self.clock = clock

    # files

    @_threaded
    def add_file(self, file_id: str, owner: str, purpose: str, filename: str,
                 content: bytes) -> StoredFile:
        row = StoredFile(id=file_id, owner=owner, purpose=purpose, filename=filename,
                         bytes=len(content), created_at=int(self.clock()), content=content)
        with self.sessions() as s:
            s.add(row)
            s.commit()
        return row

    @_threaded
    def get_file(self, file_id: str, owner: str | None, content: bool = False) -> StoredFile | None:
        """The file (its bytes loaded only with `content`); None when missing or not `owner`'s
        (owner None: any)."""
        with self.sessions() as s:
            row = s.scalar(select(StoredFile).where(StoredFile.id == file_id))
            if row is None or (owner is not None and row.owner != owner):
                return None
            if content:
                _ = row.content
            return row

    @_threaded
    def list_files(self, owner: str, purpose: str | None, after: str | None, limit: int,
                   newest_first: bool = True) -> tuple[list[StoredFile], bool]:
        columns = [c for c in StoredFile.__table__.c if c.name != "content"]
        query = select(*columns).where(StoredFile.owner == owner)
        if purpose:
            query = query.where(StoredFile.purpose == purpose)
        with self.sessions() as s:
            if after is not None:
                seq = s.scalar(select(StoredFile.seq).where(StoredFile.id == after,
                                                            StoredFile.owner == owner))
                if seq is not None:
                    query = query.where(StoredFile.seq < seq if newest_first
                                        else StoredFile.seq > seq)
            order = StoredFile.seq.desc() if newest_first else StoredFile.seq.asc()
            rows = s.execute(query.order_by(order).limit(limit + 1)).all()
        return list(rows[:limit]), len(rows) > limit

    @_threaded
    def delete_file(self, file_id: str, owner: str) -> bool:
        with self.sessions() as s:
            gone = s.execute(delete(StoredFile).where(StoredFile.id == file_id,
                                                      StoredFile.owner == owner)).rowcount
            s.commit()
        return gone == 1

    # batches

    @_threaded
    def add_batch(self, batch: Batch) -> Batch:
        with self.sessions() as s:
            s.add(batch)
            s.commit()
        return batch

    @_threaded
    def get_batch(self, batch_id: str, owner: str | None = None) -> Batch | None:
        with self.sessions() as s:
            row = s.scalar(select(Batch).where(Batch.id == batch_id))
        return None if row is None or (owner is not None and row.owner != owner) else row

    @_threaded
    def list_batches(self, owner: str, after: str | None, limit: int) -> tuple[list[Batch], bool]:
        query = select(Batch).where(Batch.owner == owner)
        with self.sessions() as s:
            if after is not None:
                seq = s.scalar(select(Batch.seq).where(Batch.id == after, Batch.owner == owner))
                if seq is not None:
                    query = query.where(Batch.seq < seq)
            rows = list(s.scalars(query.order_by(Batch.seq.desc()).limit(limit + 1)))
        return rows[:limit], len(rows) > limit

    @_threaded
    def request_cancel(self, batch_id: str, owner: str) -> Batch | None:
        """validating / in_progress → cancelling (the runner finishes it as cancelled); other
        states are left as they are. The batch as it is now; None when missing."""
        now = int(self.clock())
        with self.sessions() as s:
            s.execute(update(Batch).where(
                Batch.id == batch_id, Batch.owner == owner,
                Batch.status.in_(("validating", "in_progress"))).values(
                status="cancelling", cancelling_at=now))
            s.commit()
            return s.scalar(select(Batch).where(Batch.id == batch_id, Batch.owner == owner))

    # the runner's side

    @_threaded
    def claimable(self, limit: int = 8) -> list[str]:
        """Ids of active batches nobody holds (or whose holder's lease lapsed), oldest first."""
        with self.sessions() as s:
            return list(s.scalars(select(Batch.id).where(
                Batch.status.in_(ACTIVE_BATCH_STATUSES), self._free()).order_by(
                Batch.seq).limit(limit)))

    def _free(self):
        return or_(Batch.claimed_by.is_(None), Batch.lease_expires_at < self.clock())

    @_threaded
    def claim(self, batch_id: str, runner: str, lease_s: float) -> bool:
        """Take the batch if nobody holds it; one UPDATE, so of racing runners one wins."""
        with self.sessions() as s:
            won = s.execute(update(Batch).where(
                Batch.id == batch_id, Batch.status.in_(ACTIVE_BATCH_STATUSES),
                self._free()).values(claimed_by=runner,
                                     lease_expires_at=self.clock() + lease_s)).rowcount
            s.commit()
        return won == 1

    @_threaded
    def renew(self, batch_id: str, runner: str, lease_s: float) -> Batch | None:
        """Extend the lease; the batch as it is now (a cancel shows as its status), or None
        when this runner no longer holds it."""
        with self.sessions() as s:
            held = s.execute(update(Batch).where(
                Batch.id == batch_id, Batch.claimed_by == runner).values(
                lease_expires_at=self.clock() + lease_s)).rowcount
            s.commit()
            return s.scalar(select(Batch).where(Batch.id == batch_id)) if held else None

    @_threaded
    def update_held(self, batch_id: str, runner: str, **values) -> bool:
        """Set `values` on a batch this runner holds; False when it does not."""
        with self.sessions() as s:
            held = s.execute(update(Batch).where(
                Batch.id == batch_id, Batch.claimed_by == runner).values(**values)).rowcount
            s.commit()
        return held == 1

    @_threaded
    def finished_lines(self, batch_id: str) -> set[int]:
        with self.sessions() as s:
            return set(s.scalars(select(BatchResult.line).where(
                BatchResult.batch_id == batch_id)))

    @_threaded
    def save_result(self, batch_id: str, runner: str, line: int, ok: bool, record: str) -> bool:
        """Store a finished line and count it, if this runner still holds the batch and the
        line was not stored before; False when the lease is lost."""
        counter = Batch.completed if ok else Batch.failed
        with self.sessions() as s:
            held = s.execute(update(Batch).where(
                Batch.id == batch_id, Batch.claimed_by == runner).values(
                {counter: counter + 1})).rowcount
            if not held:
                s.rollback()
                return False
            s.add(BatchResult(batch_id=batch_id, line=line, ok=ok, record=record))
            try:
                s.commit()
            except IntegrityError:   # stored already (by a runner before this one)
                s.rollback()
        return True

    @_threaded
    def finish(self, batch_id: str, runner: str, files: list[StoredFile], **values) -> bool:
        """The batch's last write: its output and error files and final status in one
        transaction, the lease released; False when this runner no longer holds it."""
        with self.sessions() as s:
            held = s.execute(update(Batch).where(
                Batch.id == batch_id, Batch.claimed_by == runner).values(
                claimed_by=None, lease_expires_at=None, **values)).rowcount
            if not held:
                s.rollback()
                return False
            s.add_all(files)
            s.commit()
        return True

    @_threaded
    def results(self, batch_id: str) -> list[tuple[int, bool, str]]:
        """(line, ok, record) of every finished line, in input order."""
        with self.sessions() as s:
            return [tuple(r) for r in s.execute(select(
                BatchResult.line, BatchResult.ok, BatchResult.record).where(
                BatchResult.batch_id == batch_id).order_by(BatchResult.line))]

    @_threaded
    def count_results(self, batch_id: str) -> tuple[int, int]:
        """(succeeded, failed) lines stored so far."""
        with self.sessions() as s:
            rows = dict(s.execute(select(BatchResult.ok, func.count()).where(
                BatchResult.batch_id == batch_id).group_by(BatchResult.ok)).all())
        return rows.get(True, 0), rows.get(False, 0)


__all__ = ["BatchStore"]
