"""StreamStats: chunk timings into the ITL histogram, usage, and token estimates."""
from __future__ import annotations

from gateway.request_path.stream_stats import StreamStats


class Histogram:
    def __init__(self):
        self.observed: list[float] = []

    def observe(self, value: float) -> None:
        self.observed.append(value)


def test_gaps_between_chunks_are_observed_after_the_first_token():
    itl = Histogram()
    lookups: list[int] = []
    stats = StreamStats(lambda: lookups.append(1) or itl)
    stats.first_token()
    stats.chunk()
    stats.chunk()
    assert stats.chunks == 3 and len(itl.observed) == 2 and all(g >= 0 for g in itl.observed)
    assert lookups == [1]          # the histogram child is looked up once per stream
    assert stats.last_chunk_at >= stats.first_token_at


def test_engine_usage_wins_over_estimates():
    stats = StreamStats(Histogram)
    stats.first_token()
    stats.chunk()
    assert stats.tokens(prompt_estimate=7, failed=False, stream=True) == (7, 1)
    assert stats.tokens(prompt_estimate=7, failed=False, stream=False) == (7, 0)
    stats.usage({"prompt_tokens": 12, "completion_tokens": 30})
    assert stats.tokens(prompt_estimate=7, failed=False, stream=True) == (12, 30)


def test_a_failure_before_the_first_token_costs_nothing():
    stats = StreamStats(Histogram)
    assert stats.tokens(prompt_estimate=50, failed=True, stream=True) == (0, 0)


def test_text_is_kept_only_when_asked():
    stats = StreamStats(Histogram)
    assert stats.text() is None
    stats.collect_text()
    stats.text_parts += ["Par", "is"]
    assert stats.text() == "Paris"
