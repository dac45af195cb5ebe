"""A batch's input file read line by line, and the output / error file lines it leads to.

    lines, failures = parse_input(content, endpoint="/v1/chat/completions")
    # lines:    [BatchLine(number=1, custom_id="a", body={...}), ...]   (to run)
    # failures: [LineFailure(number=3, custom_id=None, code="invalid_json_line", message=...)]
    success_record(custom_id, request_id, 200, body)   # a line of the output file
    failure_record(custom_id, request_id, 400, body)   # an engine / gateway refusal: error file
    error_record(failure)                              # a line that could not run: error file

Each input line is {"custom_id": str, "method": "POST", "url": <the batch's endpoint>,
"body": {...}}. A line that is not that fails alone, with its line number, and every other
line still runs; blank lines are skipped (not counted).
"""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from common.error_codes import ErrorCode
from gateway.batch.objects import new_id


@dataclass(frozen=True, slots=True)
class BatchLine:
    number: int          # 1-based line number in the input file
    custom_id: str
    body: dict


@dataclass(frozen=True, slots=True)
class LineFailure:
    number: int
    custom_id: str | None
    code: str
    message: str


def parse_input(content: bytes, endpoint: str) -> tuple[list[BatchLine], list[LineFailure]]:
    lines: list[BatchLine] = []
    failures: list[LineFailure] = []
    seen: set[str] = set()
    for number, raw in enumerate(content.split(b"\n"), start=1):
        if not raw.strip():
            continue
        item = _parse_line(number, raw, endpoint)
        if isinstance(item, BatchLine) and item.custom_id in seen:
            item = LineFailure(number, item.custom_id, ErrorCode.DUPLICATE_CUSTOM_ID,
                               f"line {number}: custom_id '{item.custom_id}' is used by an "
                               "earlier line; each line needs its own")
        if isinstance(item, BatchLine):
            seen.add(item.custom_id)
            lines.append(item)
        else:
            failures.append(item)
    return lines, failures


def _parse_line(number: int, raw: bytes, endpoint: str) -> BatchLine | LineFailure:
    try:
        item = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return LineFailure(number, None, ErrorCode.INVALID_JSON_LINE,
                           f"line {number} is not valid JSON")
    if not isinstance(item, dict):
        return LineFailure(number, None, ErrorCode.INVALID_JSON_LINE,
                           f"line {number} is not a JSON object")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineFailure(number, None, ErrorCode.MISSING_REQUIRED_PARAMETER,
                           f"line {number}: custom_id must be a non-empty string")
    problem = _request_problem(item, endpoint)
    if problem is not None:
        return LineFailure(number, custom_id, problem[0], f"line {number}: {problem[1]}")
    return BatchLine(number, custom_id, item["body"])


def _request_problem(item: dict, endpoint: str) -> tuple[str, str] | None:
    if item.get("method") != "POST":
        return ErrorCode.INVALID_METHOD, f"method must be 'POST', not {item.get('method')!r}"
    if item.get("url") != endpoint:
        return ErrorCode.INVALID_URL, (f"url {item.get('url')!r} does not match the batch's "
                                       f"endpoint '{endpoint}'")
    body = item.get("body")
    if not isinstance(body, dict):
        return ErrorCode.INVALID_REQUEST, "body must be a JSON object"
    if body.get("stream"):
        return ErrorCode.UNSUPPORTED_VALUE, "stream is not supported in a batch"
    return None


def success_record(custom_id: str, request_id: str, status: int, body) -> str:
    return _record(custom_id, {"status_code": status, "request_id": request_id, "body": body},
                   None)


def failure_record(custom_id: str, request_id: str, status: int, body) -> str:
    return success_record(custom_id, request_id, status, body)


def error_record(failure: LineFailure) -> str:
    return _record(failure.custom_id, None, {"code": failure.code, "message": failure.message,
                                             "line": failure.number})


def _record(custom_id: str | None, response: dict | None, error: dict | None) -> str:
    return orjson.dumps({"id": new_id("batch_req_"), "custom_id": custom_id,
                         "response": response, "error": error}).decode()


__all__ = ["BatchLine", "LineFailure", "error_record", "failure_record", "parse_input",
           "success_record"]
