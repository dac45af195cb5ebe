"""The request path's per-version books: a request counts for the version its split chose,
even when it is refused before any backend of that version takes it."""
from common.metric_names import Metric
from registry.snapshot import SplitView
from tests.gateway.conftest import backend, chat_body, model


def requests_of(gw, version: str, code: str) -> float:
    return gw.state.metrics.registry.get_sample_value(
        Metric.REQUESTS.total, {"model": "m", "version": version, "code": code}) or 0.0


def test_refusals_after_the_split_count_for_the_chosen_version(make_gateway, engines):
    # Every request goes to v2 (v1 keeps weight 0); v2's only backend fails, so its breaker
    # opens and later requests are refused before reaching any backend.
    splits = (SplitView("v1", 0.0), SplitView("v2", 1.0))
    gw = make_gateway([model("m", [backend(engines[0], version="v1"),
                                   backend(engines[1], version="v2")], splits=splits)],
                      breaker={"failure_threshold": 2, "open_seconds": 60})
    engines[1].control(fail_status=500)
    with gw.client() as c:
        codes = [c.post("/v1/chat/completions", json=chat_body()).status_code for _ in range(6)]
    assert codes == [502, 502, 503, 503, 503, 503]
    assert engines[1].stats()["requests"] == 2 and engines[0].stats()["requests"] == 0
    assert (requests_of(gw, "v2", "502"), requests_of(gw, "v2", "503")) == (2, 4)
    assert requests_of(gw, "none", "503") == 0
