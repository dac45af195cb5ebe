"""Decode steps through persistent input buffers, replayed from CUDA graphs.

A decode step on a small model is dominated by kernel launches (a dozen per layer); a
captured graph replays them all with one launch. The graph reads its inputs from fixed
addresses, so this class owns those buffers (sized for the largest captured batch and the
longest context) and copies each step's inputs into them. Rows past the real batch are
padding: slot -1 (the Triton KV store skips it), context length 0 (the decode kernel writes
zeros). Only the Triton attention backend is capture-safe, and only steps where every
sequence brings one token and none uses a LoRA adapter take this path.
"""
from __future__ import annotations

import logging
import time

import torch

from builtin_engine.kernels.attention import AttentionMetadata
from builtin_engine.kernels.cuda_graphs import DecodeGraphs, default_batch_sizes

logger = logging.getLogger(__name__)

MODES = ("auto", "off", "static")  # static: the buffers and padding without capture


class GraphedDecode:
    def __init__(self, model, kv_caches, max_batch: int, max_model_len: int, block_size: int,
                 device: torch.device, pad_eagerly: bool = False):
        self.model = model
        self.kv_caches = kv_caches
        self.max_batch = max_batch
        self.max_model_len = max_model_len
        self.max_blocks = -(-max_model_len // block_size)
        self.graphs = DecodeGraphs(default_batch_sizes(max_batch), device, pad_eagerly)

        def buffer(*shape, dtype=torch.int64, fill=0):
            return torch.full(shape, fill, dtype=dtype, device=device)

        self.input_ids = buffer(max_batch)
        self.positions = buffer(max_batch)
        self.slot_mapping = buffer(max_batch, fill=-1)
        self.seq_lens = buffer(max_batch, dtype=torch.int32)
        self.block_tables = buffer(max_batch, self.max_blocks, dtype=torch.int32)
        self.query_start_loc = torch.arange(max_batch + 1, dtype=torch.int32, device=device)

    def capture(self) -> None:
        if not self.graphs.enabled:
            return
        started = time.monotonic()
        self.graphs.capture(self._step)
        logger.info("decode CUDA graphs: %d batch sizes up to %d captured in %.1fs",
                    len(self.graphs.captured_sizes), self.max_batch,
                    time.monotonic() - started)

    def accepts(self, meta: AttentionMetadata, lora) -> bool:
        return (meta.is_pure_decode and lora is None and meta.num_seqs <= self.max_batch
                and meta.block_tables.shape[1] <= self.max_blocks)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [n, hidden] for a pure-decode step (a view: read before the next)."""
        n, width = meta.num_seqs, meta.block_tables.shape[1]
        padded = self.graphs.padded_size(n) or n
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slot_mapping[:n].copy_(meta.slot_mapping)
        self.seq_lens[:n].copy_(meta.seq_lens)
        # Columns past `width` keep stale ids: the kernel reads only a row's own blocks.
        self.block_tables[:n, :width].copy_(meta.block_tables)
        if padded > n:
            self.slot_mapping[n:padded].fill_(-1)
            self.seq_lens[n:padded].fill_(0)
        return self.graphs.run(n, self._step)

    def _step(self, batch: int) -> torch.Tensor:
        meta = AttentionMetadata(
            slot_mapping=self.slot_mapping[:batch],
            query_start_loc=self.query_start_loc[:batch + 1],
            seq_lens=self.seq_lens[:batch], block_tables=self.block_tables[:batch],
            query_lens=[1] * batch, seq_lens_list=[self.max_model_len] * batch,
            max_query_len=1, max_seq_len=self.max_model_len)
        return self.model(self.input_ids[:batch], self.positions[:batch], self.kv_caches, meta)


def build_graphed_decode(config, model, kv_caches, max_model_len: int,
                         device: torch.device) -> GraphedDecode | None:
    """The graphed decode path the config asks for, or None (eager decode)."""
    mode = config.decode_graphs
    if mode not in MODES:
        raise ValueError(f"decode_graphs must be one of {MODES}, got {mode!r}")
    if mode == "off" or config.resolved_attention_backend() != "triton":
        return None
    if mode == "auto" and device.type != "cuda":
        return None
    max_batch = min(config.max_num_seqs, config.max_graph_batch)
    graphed = GraphedDecode(model, kv_caches, max_batch, max_model_len, config.block_size,
                            device, pad_eagerly=mode == "static")
    graphed.capture()
    return graphed
