"""JSON structured logs: one line per record, a fixed set of fields, no prompts by default.

Request context goes through `extra`:

    logger.info("request finished", extra={"request_id": rid, "model": "smollm2",
                                           "backend": "b1", "status": 200,
                                           "tokens": 42, "latency_ms": 812.5})

Only the fields below are written, so a stray `extra` can never leak data.
Prompt and completion text (`prompt`, `messages`, `completion`) is dropped
unless `configure_logging(log_prompts=True)`.

Lines are written in batches (`BatchedLineHandler`): a gateway logs one line per request, and
a write per line cost more than the rest of the line. A batch is written every
`flush_interval_s` (0.2 s), when `max_lines` wait, at once for WARNING and above, and on exit.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import TextIO

import orjson

from common.request_context import current_request_id
from common.tracing import current_trace_id

CONTEXT_FIELDS = ("request_id", "trace_id", "model", "backend", "status", "tokens", "latency_ms")
PROMPT_FIELDS = ("prompt", "messages", "completion")
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


class JsonFormatter(logging.Formatter):
    def __init__(self, log_prompts: bool = False):
        super().__init__()
        self.log_prompts = log_prompts
        self._second = -1
        self._second_text = ""

    def _timestamp(self, created: float) -> str:
        """ISO 8601 UTC with milliseconds; the part up to the second is formatted once a second."""
        second = int(created)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        out = self._head(record.created, record.levelname, record.name, record.getMessage())
        self._add_fields(out, lambda field: getattr(record, field, None))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return self._line(self._with_ids(out))

    def format_fields(self, created: float, levelname: str, name: str, msg: str,
                      fields: dict) -> str:
        """The line `format` writes for a record of `name` whose `extra` is `fields`."""
        out = self._head(created, levelname, name, msg)
        self._add_fields(out, fields.get)
        return self._line(self._with_ids(out))

    def _add_fields(self, out: dict, get) -> None:
        """The known fields `get(field)` gives (prompt text only with log_prompts)."""
        for field in CONTEXT_FIELDS + PROMPT_FIELDS if self.log_prompts else CONTEXT_FIELDS:
            value = get(field)
            if value is not None:
                out[field] = value

    def _head(self, created: float, levelname: str, name: str, msg: str) -> dict:
        return {"ts": self._timestamp(created), "level": levelname, "logger": name, "msg": msg}

    @staticmethod
    def _with_ids(out: dict) -> dict:
        if "trace_id" not in out and (trace_id := current_trace_id()):
            out["trace_id"] = trace_id
        if "request_id" not in out and (request_id := current_request_id()):
            out["request_id"] = request_id
        return out

    @staticmethod
    def _line(out: dict) -> str:
        # JSON escapes newlines, so a record is always exactly one line.
        try:
            return orjson.dumps(out, default=str).decode()
        except TypeError:   # what orjson refuses (integers past 64 bits) json writes
            return json.dumps(out, default=str, ensure_ascii=False)


class BatchedLineHandler(logging.Handler):
    """Formatted lines gathered and written to `stream` in batches (see the module docstring).

    A daemon thread writes what waits every `flush_interval_s`; lines at WARNING and above
    are written at once with everything before them, so an error is never held back. A
    process killed outright loses at most one interval of lines."""

    def __init__(self, stream: TextIO, flush_interval_s: float = 0.2, max_lines: int = 512):
        super().__init__()
        self.stream = stream
        self.flush_interval_s = flush_interval_s
        self.max_lines = max_lines
        self._lines: list[str] = []
        self._closed = False
        self._start_flusher()
        # a forked gateway worker inherits the handler but not its thread
        os.register_at_fork(after_in_child=self._start_flusher)

    def _start_flusher(self) -> None:
        if self.flush_interval_s > 0 and not self._closed:
            threading.Thread(target=self._flush_periodically, name="log-flusher",
                             daemon=True).start()

    def _flush_periodically(self) -> None:
        while not self._closed:
            time.sleep(self.flush_interval_s)
            self.flush()

    def emit(self, record: logging.LogRecord) -> None:   # called holding self.lock
        try:
            self._lines.append(self.format(record))
        except Exception:
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING or len(self._lines) >= self.max_lines \
                or self.flush_interval_s <= 0:
            self._write()

    def emit_line(self, line: str, levelno: int) -> None:
        """A line formatted elsewhere (`write_info`), batched as `emit` batches a record's."""
        with self.lock:
            self._lines.append(line)
            if levelno >= logging.WARNING or len(self._lines) >= self.max_lines \
                    or self.flush_interval_s <= 0:
                self._write()

    def flush(self) -> None:
        with self.lock:
            self._write()

    def _write(self) -> None:
        if not self._lines:
            return
        text = "\n".join(self._lines) + "\n"
        self._lines.clear()
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):   # stderr closed or gone: logging must not fail requests
            pass

    def close(self) -> None:
        self.flush()
        self._closed = True
        super().close()


def write_info(logger: logging.Logger, msg: str, fields: dict) -> None:
    """`logger.info(msg, extra=fields)`, the same line, for a line written once a request.

    Where every handler the record would reach is this module's (no filters, our formatter),
    the line is formatted and batched directly: the LogRecord, the handler chain and the
    record's attribute reads cost four fifths of a logged line. Any other set-up (a test's
    capture, an operator's own handler) gets the record through `logging` as usual."""
    if not logger.isEnabledFor(logging.INFO):
        return
    handlers = _json_handlers(logger)
    if handlers is None:
        logger.info(msg, extra=fields)
        return
    created = time.time()
    for handler in handlers:
        if logging.INFO >= handler.level:
            handler.emit_line(handler.formatter.format_fields(
                created, "INFO", logger.name, msg, fields), logging.INFO)


def _json_handlers(logger: logging.Logger) -> list[BatchedLineHandler] | None:
    """The handlers a record of `logger` reaches, when nothing but this module's would see it
    (no filter on the way, each a BatchedLineHandler with a JsonFormatter); else None."""
    found: list[BatchedLineHandler] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if type(handler) is not BatchedLineHandler or handler.filters \
                    or type(handler.formatter) is not JsonFormatter:
                return None
            found.append(handler)
        current = current.parent if current.propagate else None
    return found


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING, ERROR")
    return value


def _skip_unwritten_record_fields() -> None:
    """The JSON lines carry no caller, thread or process fields, so records need not gather
    them: the stdlib's documented switches (Logging HOWTO, "Optimization") turn off the stack
    walk and the thread, process and multiprocessing lookups each record otherwise pays for
    (one line per request on the gateway's hot path)."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def configure_logging(level: str | int = "INFO", stream: TextIO | None = None,
                      log_prompts: bool = False,
                      flush_interval_s: float = 0.2) -> logging.Handler:
    """Send the root logger and uvicorn's loggers to one JSON handler (idempotent).
    `flush_interval_s=0` writes every line at once."""
    handler = BatchedLineHandler(stream or sys.stderr, flush_interval_s=flush_interval_s)
    handler.setFormatter(JsonFormatter(log_prompts=log_prompts))
    handler._inferplane_json = True  # marks handlers to replace on reconfiguration
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_inferplane_json", False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(_level(level))
    _skip_unwritten_record_fields()
    for name in UVICORN_LOGGERS:
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers = []
        uvicorn_logger.propagate = True
    return handler
