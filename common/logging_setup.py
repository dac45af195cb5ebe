"""JSON structured logs: one line per record, a fixed set of fields, no prompts by default.

Request context goes through `extra`:

    logger.info("request finished", extra={"request_id": rid, "model": "smollm2",
                                           "backend": "b1", "status": 200,
                                           "tokens": 42, "latency_ms": 812.5})

Only the fields below are written, so a stray `extra` can never leak data.
Prompt and completion text (`prompt`, `messages`, `completion`) is dropped
unless `configure_logging(log_prompts=True)`.
"""
from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import TextIO

from common.request_context import current_request_id
from common.tracing import current_trace_id

CONTEXT_FIELDS = ("request_id", "trace_id", "model", "backend", "status", "tokens", "latency_ms")
PROMPT_FIELDS = ("prompt", "messages", "completion")
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


class JsonFormatter(logging.Formatter):
    def __init__(self, log_prompts: bool = False):
        super().__init__()
        self.log_prompts = log_prompts

    def format(self, record: logging.LogRecord) -> str:
        out: dict = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for field in CONTEXT_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                out[field] = value
        if "trace_id" not in out and (trace_id := current_trace_id()):
            out["trace_id"] = trace_id
        if "request_id" not in out and (request_id := current_request_id()):
            out["request_id"] = request_id
        if self.log_prompts:
            for field in PROMPT_FIELDS:
                value = getattr(record, field, None)
                if value is not None:
                    out[field] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # json escapes newlines, so a record is always exactly one line.
        return json.dumps(out, default=str, ensure_ascii=False)


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING, ERROR")
    return value


def configure_logging(level: str | int = "INFO", stream: TextIO | None = None,
                      log_prompts: bool = False) -> logging.Handler:
    """Send the root logger and uvicorn's loggers to one JSON handler (idempotent)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(log_prompts=log_prompts))
    handler._inferplane_json = True  # marks handlers to replace on reconfiguration
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_inferplane_json", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_level(level))
    for name in UVICORN_LOGGERS:
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers = []
        uvicorn_logger.propagate = True
    return handler
