"""CUDA-graph capture and replay of decode steps for a fixed list of padded batch sizes.

Contract (how a model runner adopts it):
- The caller owns persistent input buffers sized for the largest batch (input_ids,
  positions, slot_mapping, seq_lens, block_tables with max_model_len worth of blocks) and
  one AttentionMetadata built on views of them, with max_seq_len = max_model_len so that
  host-side choices (the decode split count) suit every later step.
- `step(b)` runs one decode forward for the first b rows of those buffers and returns a
  tensor whose first dimension is b. It must read inputs only from the buffers and must not
  synchronise with the host (no .item(), .tolist(), no allocation that depends on values).
- Before `run(n, step)` the caller writes the n real rows, and pads rows n..padded_size(n)-1
  with slot -1 (the Triton KV store skips negative slots), seq_len 0 and any block ids; the
  padded rows' outputs are discarded.
- `run` replays the graph of the smallest captured size >= n and returns its output's first n
  rows (a view into the graph's static output: copy it before the next replay if kept).
  Without a graph for n (CPU, capture disabled, n too large) it calls step(n) eagerly, so the
  caller has one code path; with pad_eagerly it calls step(padded_size(n)) and keeps n rows.
  On CPU `capture` does nothing.
Only the Triton attention backend is capture-safe: the torch reference sizes its gathers from
host values.
"""
from __future__ import annotations

import bisect
import logging
from typing import Callable

import torch

logger = logging.getLogger(__name__)

Step = Callable[[int], torch.Tensor]


def default_batch_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8 up to max_num_seqs (vLLM's spacing)."""
    sizes = [b for b in (1, 2, 4) if b <= max_num_seqs]
    sizes += list(range(8, max_num_seqs + 1, 8))
    if max_num_seqs not in sizes:
        sizes.append(max_num_seqs)
    return sorted(set(sizes))


class DecodeGraphs:
    def __init__(self, batch_sizes: list[int], device: torch.device | str,
                 pad_eagerly: bool = False):
        self.device = torch.device(device)
        # Without graphs, still run the padded size: the static-buffer path (padding rows
        # included) then runs on any device, which is how the CPU tests check it.
        self.pad_eagerly = pad_eagerly
        self.batch_sizes = sorted(set(batch_sizes))
        if not self.batch_sizes or self.batch_sizes[0] < 1:
            raise ValueError(f"batch sizes must be positive, got {batch_sizes}")
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, torch.Tensor] = {}

    @property
    def captured_sizes(self) -> list[int]:
        return sorted(self._graphs)

    def padded_size(self, n: int) -> int | None:
        """The captured size a batch of n replays with, or None if n is larger than all."""
        i = bisect.bisect_left(self.batch_sizes, n)
        return self.batch_sizes[i] if i < len(self.batch_sizes) else None

    def capture(self, step: Step, warmup: int = 2) -> None:
        """Capture step(b) for every batch size, largest first, sharing one memory pool."""
        if not self.enabled:
            return
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(stream), torch.inference_mode():
            for size in reversed(self.batch_sizes):
                for _ in range(warmup):  # compiles kernels and settles allocator state
                    step(size)
                torch.cuda.synchronize(self.device)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self._outputs[size] = step(size)
                self._graphs[size] = graph
        torch.cuda.synchronize(self.device)
        logger.info("captured decode CUDA graphs for batch sizes %s", self.captured_sizes)

    def run(self, n: int, step: Step) -> torch.Tensor:
        size = self.padded_size(n)
        graph = self._graphs.get(size) if size is not None else None
        if graph is None:
            return step(size)[:n] if self.pad_eagerly and size is not None else step(n)
        graph.replay()
        return self._outputs[size][:n]
