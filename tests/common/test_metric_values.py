"""Worker metric values: written through to prometheus_client's per-process files."""
from __future__ import annotations

import os
import signal

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from common.metric_values import file_values


@pytest.fixture
def shared_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", file_values())
    yield tmp_path
    values.ValueClass.close_all_files()


def _scrape(path) -> str:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    return generate_latest(registry).decode()


def test_updates_are_in_the_files_at_once(shared_dir):
    registry = CollectorRegistry()
    requests = Counter("requests", "r", ["code"], registry=registry)
    latency = Histogram("latency", "l", buckets=(0.1, 1.0), registry=registry)
    inflight = Gauge("inflight", "i", multiprocess_mode="livesum", registry=registry)
    requests.labels("200").inc()
    requests.labels("200").inc(2)
    latency.observe(0.5)
    inflight.inc(3)
    inflight.dec()
    text = _scrape(shared_dir)
    assert 'requests_total{code="200"} 3.0' in text
    assert 'latency_bucket{le="1.0"} 1.0' in text and 'latency_bucket{le="0.1"} 0.0' in text
    assert "inflight 2.0" in text
    # the file is prometheus_client's own: its reader finds the same value
    counter_file = next(shared_dir.glob("counter_*.db"))
    read = dict((k, v) for k, v, _ in MmapedDict(str(counter_file), read_mode=True)
                .read_all_values())
    assert sorted(read.values()) == [3.0]


def test_a_forked_child_counts_in_its_own_files(shared_dir):
    counter = Counter("jobs", "j", registry=CollectorRegistry())
    counter.inc(10)
    pid = os.fork()
    if pid == 0:   # the child starts from zero in files named by its pid, then is killed
        counter.inc(5)
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert len(list(shared_dir.glob("counter_*.db"))) == 2
    assert "jobs_total 15.0" in _scrape(shared_dir)   # a killed process's counts stay
    assert counter._value.get() == 10.0


def test_many_keys_grow_the_file_and_keep_every_value(shared_dir):
    # each key carries the help text: 3,000 of them outgrow the first 1 MiB mapping
    family = Counter("series", "s" * 400, ["n"], registry=CollectorRegistry())
    children = [family.labels(str(i)) for i in range(3000)]
    for i, child in enumerate(children):
        child.inc(i)
    children[0].inc(7)
    assert next(shared_dir.glob("counter_*.db")).stat().st_size > 1 << 20
    text = _scrape(shared_dir)
    assert 'series_total{n="2999"} 2999.0' in text and 'series_total{n="0"} 7.0' in text
