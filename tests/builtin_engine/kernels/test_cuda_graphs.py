"""DecodeGraphs: padding choice everywhere; on CPU capture is a no-op and run is eager."""
import pytest
import torch

from builtin_engine.kernels.cuda_graphs import DecodeGraphs, default_batch_sizes


def test_default_sizes():
    assert default_batch_sizes(3) == [1, 2, 3]
    assert default_batch_sizes(20) == [1, 2, 4, 8, 16, 20]


def test_padded_size_is_smallest_captured_at_least_n():
    graphs = DecodeGraphs([8, 1, 4, 2], "cpu")
    assert [graphs.padded_size(n) for n in (1, 3, 4, 5, 8, 9)] == [1, 4, 4, 8, 8, None]


def test_cpu_capture_is_noop_and_run_is_eager():
    graphs = DecodeGraphs([1, 2, 4], "cpu")
    calls = []

    def step(b):
        calls.append(b)
        return torch.arange(b)

    graphs.capture(step)
    assert calls == [] and graphs.captured_sizes == [] and not graphs.enabled
    assert graphs.run(3, step).tolist() == [0, 1, 2]
    assert calls == [3]


def test_rejects_bad_sizes():
    with pytest.raises(ValueError):
        DecodeGraphs([], "cpu")
    with pytest.raises(ValueError):
        DecodeGraphs([0, 2], "cpu")


def test_pad_eagerly_runs_the_padded_size_and_keeps_n_rows():
    graphs = DecodeGraphs([1, 2, 4], "cpu", pad_eagerly=True)
    calls = []

    def step(b):
        calls.append(b)
        return torch.arange(b)

    assert graphs.run(3, step).tolist() == [0, 1, 2]
    assert graphs.run(5, step).tolist() == [0, 1, 2, 3, 4]  # beyond every size: eager n
    assert calls == [4, 5]
