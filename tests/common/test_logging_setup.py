"""common.logging_setup: one JSON object per line, known fields only, prompts opt-in."""
from __future__ import annotations

import io
import json
import logging
import os
import time
from datetime import datetime, timezone

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common import tracing
from common.logging_setup import configure_logging, write_info

LOGGER = logging.getLogger("inferplane.test.logging")


@pytest.fixture
def log_lines():
    """Configure JSON logging into a buffer; return a reader of the parsed lines."""
    root = logging.getLogger()
    saved_level = root.level
    saved_switches = (logging._srcfile, logging.logThreads, logging.logProcesses,
                      logging.logMultiprocessing)
    stream = io.StringIO()
    handlers = []

    def configure(**kwargs):
        handlers.append(configure_logging(stream=stream, **kwargs))

    def lines() -> list[dict]:
        for handler in handlers:
            handler.flush()
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    yield configure, lines
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(saved_level)
    (logging._srcfile, logging.logThreads, logging.logProcesses,
     logging.logMultiprocessing) = saved_switches


def test_record_is_one_json_line_with_context_fields(log_lines):
    configure, lines = log_lines
    configure()
    LOGGER.info("request finished\nsecond line", extra={
        "request_id": "req-1", "model": "smollm2", "backend": "b1", "status": 200,
        "tokens": 42, "latency_ms": 812.5, "api_key": "ip-secret"})
    (line,) = lines()
    assert line["msg"] == "request finished\nsecond line"
    assert line["level"] == "INFO" and line["logger"] == "inferplane.test.logging"
    assert line["ts"].endswith("Z") and "T" in line["ts"]
    assert {k: line[k] for k in ("request_id", "model", "backend", "status", "tokens",
                                 "latency_ms")} == {
        "request_id": "req-1", "model": "smollm2", "backend": "b1", "status": 200,
        "tokens": 42, "latency_ms": 812.5}
    assert "api_key" not in line, "only known fields are written"


def test_prompts_are_dropped_unless_enabled(log_lines):
    configure, lines = log_lines
    configure()
    LOGGER.info("req", extra={"prompt": "my secret plan", "messages": [{"role": "user"}]})
    configure(log_prompts=True)
    LOGGER.info("req", extra={"prompt": "my secret plan", "completion": "ok"})
    first, second = lines()
    assert "prompt" not in first and "messages" not in first
    assert second["prompt"] == "my secret plan" and second["completion"] == "ok"


def test_trace_id_comes_from_the_active_span(log_lines):
    configure, lines = log_lines
    configure()
    tracing.setup_tracing("gw", exporter=InMemorySpanExporter())
    try:
        with tracing.get_tracer().start_as_current_span("req"):
            expected = tracing.current_trace_id()
            LOGGER.info("inside")
        LOGGER.info("outside")
    finally:
        tracing.shutdown_tracing()
    inside, outside = lines()
    assert inside["trace_id"] == expected and len(expected) == 32
    assert "trace_id" not in outside


def test_exceptions_and_levels(log_lines):
    configure, lines = log_lines
    configure(level="warning")
    LOGGER.info("filtered out")
    try:
        raise RuntimeError("engine exploded")
    except RuntimeError:
        LOGGER.exception("upstream failed", extra={"backend": "b2"})
    (line,) = lines()
    assert line["level"] == "ERROR" and line["backend"] == "b2"
    assert "RuntimeError: engine exploded" in line["exc"]


def test_reconfiguring_does_not_duplicate_lines(log_lines):
    configure, lines = log_lines
    configure()
    configure()
    LOGGER.warning("once")
    assert len(lines()) == 1


def test_unknown_level_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(level="LOUD")


def _wait_for(predicate, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def batched():
    """A handler writing batches to a StringIO every 50 ms, removed afterwards."""
    stream = io.StringIO()
    handler = configure_logging(stream=stream, flush_interval_s=0.05)
    yield stream
    logging.getLogger().removeHandler(handler)
    handler.close()


def test_info_lines_wait_for_the_next_batch(batched):
    LOGGER.info("first")
    LOGGER.info("second")
    assert batched.getvalue() == ""          # not one write per line
    assert _wait_for(lambda: batched.getvalue().count("\n") == 2)
    assert [json.loads(line)["msg"] for line in batched.getvalue().splitlines()] == \
        ["first", "second"]


def test_a_warning_writes_everything_waiting_at_once_in_order(batched):
    LOGGER.info("before")
    LOGGER.warning("trouble")
    assert [json.loads(line)["msg"] for line in batched.getvalue().splitlines()] == \
        ["before", "trouble"]


def test_timestamps_are_utc_with_milliseconds(batched):
    LOGGER.warning("now")
    ts = json.loads(batched.getvalue())["ts"]
    parsed = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs(parsed.timestamp() - time.time()) < 5 and len(ts) == len("2026-01-01T00:00:00.000Z")


def test_a_forked_worker_writes_its_lines_without_exiting_cleanly(tmp_path):
    """Gateway workers are forked and end with os._exit (no atexit flush): the child's own
    flusher thread must write its batches."""
    path = tmp_path / "log.jsonl"
    with open(path, "w") as stream:
        handler = configure_logging(stream=stream, flush_interval_s=0.05)
        try:
            pid = os.fork()
            if pid == 0:
                LOGGER.info("from the worker")
                time.sleep(0.5)
                os._exit(0)
            os.waitpid(pid, 0)
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()
    assert [json.loads(line)["msg"] for line in path.read_text().splitlines()] == \
        ["from the worker"]


def test_records_skip_the_fields_no_line_carries(log_lines):
    """No stack walk, thread or process lookup per record (one per request on the gateway)."""
    configure, lines = log_lines
    configure()
    seen = []
    probe = logging.Handler()
    probe.emit = seen.append
    LOGGER.addHandler(probe)
    try:
        LOGGER.info("request finished", extra={"request_id": "r1", "status": 200})
    finally:
        LOGGER.removeHandler(probe)
    record = seen[0]
    assert (record.lineno, record.thread, record.process, record.processName) == (
        0, None, None, None)
    assert {k: lines()[-1][k] for k in ("msg", "request_id", "status")} == {
        "msg": "request finished", "request_id": "r1", "status": 200}


FIELDS = {"request_id": "req-7", "model": "m", "status": 200, "backend": "b1", "tokens": 9,
          "latency_ms": 3.5, "api_key": "ip-secret"}


def test_write_info_writes_the_line_logger_info_would(log_lines):
    configure, lines = log_lines
    configure()
    LOGGER.info("request finished", extra=FIELDS)
    write_info(LOGGER, "request finished", FIELDS)
    through_logging, direct = lines()
    assert through_logging.pop("ts")[:10] == direct.pop("ts")[:10]
    assert direct == through_logging and "api_key" not in direct


def test_write_info_gives_a_handler_not_ours_its_record(log_lines, caplog):
    configure, lines = log_lines
    configure()
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        write_info(LOGGER, "request finished", FIELDS)
    assert [r.request_id for r in caplog.records] == ["req-7"]
    assert [line["request_id"] for line in lines()] == ["req-7"]


def test_write_info_applies_a_filter_on_the_way(log_lines):
    configure, lines = log_lines
    configure()
    LOGGER.addFilter(logging.Filter("somewhere.else"))
    try:
        write_info(LOGGER, "filtered out", FIELDS)
    finally:
        LOGGER.filters.clear()
    write_info(LOGGER, "written", FIELDS)
    assert [line["msg"] for line in lines()] == ["written"]


def test_write_info_respects_levels(log_lines):
    configure, lines = log_lines
    configure(level="WARNING")
    write_info(LOGGER, "request finished", FIELDS)
    logging.getLogger().setLevel(logging.INFO)
    for handler in logging.getLogger().handlers:
        handler.setLevel(logging.WARNING)
    try:
        write_info(LOGGER, "below the handler's level", FIELDS)
    finally:
        for handler in logging.getLogger().handlers:
            handler.setLevel(logging.NOTSET)
    assert lines() == []
