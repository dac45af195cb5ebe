"""A complete stream is accounted: 200, completion tokens and inter-token latencies (a client
that leaves is covered in test_streaming.py)."""
import time

import pytest

from common.metric_names import Metric
from tests.gateway.conftest import backend, chat_body, model


@pytest.fixture
def gw(make_gateway, engines):
    return make_gateway([model("m", [backend(engines[0])])])


def _metric_lines(gw, *prefixes: str) -> list[str]:
    text = gw.client().get("/metrics").text
    return [line for line in text.splitlines() if line.startswith(prefixes)]


def test_complete_stream_counts_200_tokens_and_latencies(gw):
    with gw.client() as c, c.stream("POST", "/v1/chat/completions",
                                    json=chat_body(stream=True, max_tokens=5)) as r:
        body = r.read()
    assert body.endswith(b"data: [DONE]\n\n")
    time.sleep(0.2)
    lines = _metric_lines(gw, Metric.REQUESTS.total, Metric.TOKENS.total,
                          f"{Metric.INTER_TOKEN_LATENCY}_count")
    assert any('code="200"' in line for line in lines), lines
    assert any('kind="completion"' in line and not line.endswith(" 0.0") for line in lines), lines
    itl = [line for line in lines if line.startswith("inferplane_inter_token_latency")]
    assert itl and float(itl[0].rsplit(" ", 1)[1]) > 0
