"""A batch input file read line by line: each bad line fails alone with its line number."""
from __future__ import annotations

import orjson

from gateway.batch.lines import error_record, parse_input, success_record

URL = "/v1/chat/completions"


def line(custom_id, **extra) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": URL,
                         "body": {"model": "m", "messages": []}, **extra})


def test_good_lines_run_and_bad_ones_fail_with_their_numbers():
    content = b"\n".join([
        line("a"), b"{oops", b"   ", line("b", url="/v1/embeddings"), line("a"),
        line("c", method="PUT"), b"[1, 2]", line("d", body="text"), line("e", body={
            "stream": True}), orjson.dumps({"method": "POST"}), line("f")]) + b"\n"
    lines, failures = parse_input(content, URL)
    assert [(x.number, x.custom_id) for x in lines] == [(1, "a"), (11, "f")]
    assert [(f.number, f.code) for f in failures] == [
        (2, "invalid_json_line"), (4, "invalid_url"), (5, "duplicate_custom_id"),
        (6, "invalid_method"), (7, "invalid_json_line"), (8, "invalid_request"),
        (9, "unsupported_value"), (10, "missing_required_parameter")]
    assert all(f"line {f.number}" in f.message for f in failures)


def test_records_have_openai_batch_output_shape():
    ok = orjson.loads(success_record("a", "req_1", 200, {"choices": []}))
    assert ok["id"].startswith("batch_req_") and ok["custom_id"] == "a" and ok["error"] is None
    assert ok["response"] == {"status_code": 200, "request_id": "req_1",
                              "body": {"choices": []}}
    _, failures = parse_input(b"{oops\n", URL)
    bad = orjson.loads(error_record(failures[0]))
    assert bad["response"] is None
    assert bad["error"] == {"code": "invalid_json_line", "message": "line 1 is not valid JSON",
                            "line": 1}
