"""Runs scheduled steps on the real model: owns the KV cache, builds metadata, samples.

Per-step host work is kept to a handful of tensor constructions (one per index tensor);
everything per token is done with tensor ops, not Python loops.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate, chain

import torch

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.device_defaults import resolve_threads
from builtin_engine.core.executor import ScheduledRequest, SchedulerOutput
from builtin_engine.kernels.attention import AttentionMetadata
from builtin_engine.kernels.packed_linear import row_cap
from builtin_engine.loader import LoadedModel, torch_dtype
from builtin_engine.runner.compiled_step import build_compiled_decode
from builtin_engine.runner.graphed_decode import build_graphed_decode
from builtin_engine.runner.logprobs import TokenLogprob, pick, raw_logprobs
from builtin_engine.runner.lora import LoraBatch, LoraStore, LoraWeights
from builtin_engine.runner.sampler import Sampler

GIB = 1 << 30


@dataclass
class StepBatch:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    # rows whose logits are sampled: each sampled request's last token, or for a request
    # with k drafts its last k + 1 tokens (the verification rows)
    sample_rows: torch.Tensor
    sampled: list[ScheduledRequest]
    lora: LoraBatch | None = None  # None when no request of the step has an adapter


class ModelRunner:
    def __init__(self, config: EngineConfig, loaded: LoadedModel,
                 lora_store: LoraStore | None = None):
        self.config = config
        self.model = loaded.model
        self.cfg = loaded.llama_config
        self.device = torch.device(config.device)
        self.dtype = torch_dtype(config.dtype)
        self.block_size = config.block_size
        # Before anything compiles: inductor sizes its parallel loops by the thread count.
        self.threads, self.threads_reason = resolve_threads(config.device)
        self.enter_step_thread()
        self.eos_token_id = loaded.tokenizer.eos_token_id
        self.sampler = Sampler(loaded.tokenizer.stop_token_ids)
        self.generators: dict[str, torch.Generator] = {}
        self.step_logprobs: dict[str, TokenLogprob] = {}
        self.lora_store = lora_store or LoraStore(self.cfg, self.device, self.dtype)
        # Pinned on first schedule, so unloading an adapter never changes a running request.
        self.request_loras: dict[str, LoraWeights] = {}
        self.num_device_blocks, self.num_cpu_blocks = self._compute_num_blocks(config)
        self.kv_caches = self._allocate(self.num_device_blocks, self.device)
        self.cpu_caches = self._allocate(self.num_cpu_blocks, torch.device("cpu"),
                                         pin=self.device.type == "cuda")
        max_len = min(config.max_model_len or self.cfg.max_position, self.cfg.max_position)
        # Captured after the KV cache exists: the graphs hold its addresses.
        self.graphed = build_graphed_decode(config, self.model, self.kv_caches, max_len,
                                            self.device)
        self.compiled = build_compiled_decode(config, self.model, self.kv_caches)

    def enter_step_thread(self) -> None:
        """Give the calling thread the step's thread count. OpenMP's team size is a setting of
        each thread: a thread that runs the steps (AsyncEngine's loop) calls this first."""
        if self.threads is not None:
            torch.set_num_threads(self.threads)

    def describe(self) -> str:
        """What runs the model, for the startup line: device, dtype, kernels, graphs, KV."""
        graphs = "off"
        if self.graphed is not None:
            sizes = self.graphed.graphs.captured_sizes
            graphs = f"{len(sizes)} sizes up to {sizes[-1]}" if sizes else "static buffers"
        c = self.config
        spec = (f", n-gram speculation n={c.speculative_ngram} k={c.num_speculative_tokens}"
                if c.speculative_ngram else "")
        spec += f", {c.quantization} weights" if c.quantization else ""
        compiled = "off" if self.compiled is None else (
            f"inductor, warm-up {self.compiled.warm_up_s:.0f}s, decode attention "
            f"{'C++ kernel' if self.compiled.consts['cpu_kernel'] else 'traced'}, prompt "
            f"attention {self.compiled.cpu_prompt_kernel or 'SDPA'}, SiLU-and-mul "
            f"{'C++ kernel' if self.compiled.consts['cpu_silu'] else 'inductor'}")
        threads = f"{torch.get_num_threads()} threads ({self.threads_reason})"
        packed, why = c.resolved_pack_weights()
        cap = f"; {row_cap()[1]}" if packed else ""
        threads += f", {'oneDNN-packed' if packed else 'plain'} weights ({why}{cap})"
        return (f"{self.device.type} {c.dtype} ({c.dtype_reason}), {threads}, "
                f"{self.model.ops.name}, "
                f"decode graphs: {graphs}, compiled decode step: {compiled} "
                f"({c.resolved_compile()[1]}), KV cache {self.num_device_blocks} blocks of "
                f"{self.block_size} tokens{spec}")

    # ---- KV cache sizing -----------------------------------------------------------------
    def block_bytes(self) -> int:
        cfg = self.cfg
        elem = torch.empty((), dtype=self.dtype).element_size()
        return 2 * cfg.num_layers * self.block_size * cfg.num_kv_heads * cfg.head_dim * elem

    def num_blocks_for(self, config: EngineConfig) -> tuple[int, int]:
        if config is self.config:
            return self.num_device_blocks, self.num_cpu_blocks
        return self._compute_num_blocks(config)

    def _compute_num_blocks(self, config: EngineConfig) -> tuple[int, int]:
        per_block = self.block_bytes()
        if config.num_blocks is not None:
            device_blocks = config.num_blocks
        else:
            device_blocks = int(self._device_kv_budget(config) // per_block)
        if device_blocks < 1:
            raise ValueError(f"the KV cache budget holds no {config.block_size}-token block "
                             f"({per_block} bytes each); raise the memory budget")
        cpu_blocks = int(config.swap_space_gib * GIB // per_block)
        return device_blocks, cpu_blocks

    def _device_kv_budget(self, config: EngineConfig) -> float:
        if self.device.type != "cuda":
            return config.kv_cache_memory_gib * GIB
        free, total = torch.cuda.mem_get_info(self.device)
        used = total - free  # weights, the CUDA context and anything else on the card
        return total * config.gpu_memory_utilization - used - self._activation_headroom(config)

    def _activation_headroom(self, config: EngineConfig) -> int:
        # One forward over max_num_batched_tokens (widest intermediates) plus sampling.
        cfg = self.cfg
        width = cfg.num_heads * cfg.head_dim + 2 * cfg.num_kv_heads * cfg.head_dim
        width += 3 * cfg.intermediate_size + 4 * cfg.hidden_size
        per_token = width * 4
        sampling = config.max_num_seqs * cfg.vocab_size * 4 * 4
        return config.max_num_batched_tokens * per_token + sampling + 256 * (1 << 20)

    def _allocate(self, num_blocks: int, device: torch.device, pin: bool = False):
        if num_blocks == 0:
            return []
        cfg = self.cfg
        shape = (num_blocks, self.block_size, cfg.num_kv_heads, cfg.head_dim)

        def zeros():
            t = torch.zeros(shape, dtype=self.dtype, device=device)
            return t.pin_memory() if pin else t

        return [(zeros(), zeros()) for _ in range(cfg.num_layers)]

    # ---- one step ------------------------------------------------------------------------
    def execute(self, out: SchedulerOutput) -> dict[str, int]:
        self._swap_out(out.blocks_to_swap_out)
        self._swap_in(out.blocks_to_swap_in)
        self._copy_blocks(out.blocks_to_copy)
        if not out.scheduled:
            return {}
        batch = self._prepare(out.scheduled)
        with torch.inference_mode():
            hidden = self._forward(batch)
            if not batch.sampled:
                return {}
            logits = self.model.compute_logits(hidden[batch.sample_rows])
            return self._sample(logits, batch.sampled)

    def _sample(self, logits: torch.Tensor,
                reqs: list[ScheduledRequest]) -> dict[str, int | list[int]]:
        """Sample every row; a request with drafts gets the run of targets its drafts
        matched plus the token after it (rejection sampling, greedy case)."""
        sizes = [len(r.spec_token_ids) + 1 for r in reqs]
        row_reqs = [r for r, size in zip(reqs, sizes) for _ in range(size)]
        first_row = list(accumulate([0] + sizes[:-1]))
        wanted = [i for i, r in enumerate(reqs) if r.params.logprobs is not None]
        raw = raw_logprobs(logits, [first_row[i] for i in wanted]) if wanted else None
        histories = [None if r.history is None else (r.history, r.num_prompt_tokens)
                     for r in row_reqs]
        # Drafted rows sit j tokens further into the output (min_tokens masks read it).
        produced = [r.num_output_tokens + j for r, size in zip(reqs, sizes) for j in range(size)]
        tokens = self.sampler.sample(
            logits, [r.params for r in row_reqs], [self._generator(r) for r in row_reqs],
            produced, self.eos_token_id,
            histories if any(h is not None for h in histories) else None)
        if wanted:
            entries = pick(raw, [tokens[first_row[i]] for i in wanted],
                           [reqs[i].params.logprobs for i in wanted])
            self.step_logprobs = {reqs[i].request_id: e for i, e in zip(wanted, entries)}
        result: dict[str, int | list[int]] = {}
        for r, start, size in zip(reqs, first_row, sizes):
            if size == 1:
                result[r.request_id] = tokens[start]
                continue
            targets = tokens[start:start + size]
            accepted = 0
            while accepted < size - 1 and r.spec_token_ids[accepted] == targets[accepted]:
                accepted += 1
            result[r.request_id] = targets[:accepted + 1]
        return result

    def _forward(self, batch: StepBatch) -> torch.Tensor:
        if self.graphed is not None and self.graphed.accepts(batch.meta, batch.lora):
            return self.graphed.forward(batch.input_ids, batch.positions, batch.meta)
        if self.compiled is not None and self.compiled.accepts(batch.meta, batch.lora):
            return self.compiled.forward(batch.input_ids, batch.positions, batch.meta)
        return self.model(batch.input_ids, batch.positions, self.kv_caches, batch.meta,
                          batch.lora)

    def take_logprobs(self) -> dict[str, TokenLogprob]:
        """The last step's logprobs by request id (each step's are handed over once)."""
        taken, self.step_logprobs = self.step_logprobs, {}
        return taken

    def release(self, request_id: str) -> None:
        self.generators.pop(request_id, None)
        self.request_loras.pop(request_id, None)

    def _generator(self, req: ScheduledRequest) -> torch.Generator | None:
        if req.params.seed is None or req.params.greedy:
            return None
        gen = self.generators.get(req.request_id)
        if gen is None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(req.params.seed)
            self.generators[req.request_id] = gen
        return gen

    def _prepare(self, reqs: list[ScheduledRequest]) -> StepBatch:
        bs = self.block_size
        query_lens = [len(r.token_ids) for r in reqs]
        seq_lens = [r.start_pos + n for r, n in zip(reqs, query_lens)]
        self._check(reqs, seq_lens)
        blocks_needed = [-(-s // bs) for s in seq_lens]
        width = max(blocks_needed)
        table = [r.block_ids[:n] + [0] * (width - n) for r, n in zip(reqs, blocks_needed)]
        block_tables = torch.tensor(table, dtype=torch.int32)
        positions = torch.tensor(list(chain.from_iterable(
            range(r.start_pos, s) for r, s in zip(reqs, seq_lens))), dtype=torch.int64)
        lens = torch.tensor(query_lens, dtype=torch.int64)
        owner = torch.repeat_interleave(torch.arange(len(reqs)), lens)
        slots = block_tables[owner, positions // bs].long() * bs + positions % bs
        starts = torch.zeros(len(reqs) + 1, dtype=torch.int32)
        starts[1:] = torch.cumsum(lens, 0)
        sampled_idx = [i for i, r in enumerate(reqs) if r.sample]
        ends = starts[1:].tolist()
        rows = [row for i in sampled_idx
                for row in range(ends[i] - 1 - len(reqs[i].spec_token_ids), ends[i])]
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=slots.to(dev), query_start_loc=starts.to(dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32).to(dev),
            block_tables=block_tables.to(dev), query_lens=query_lens, seq_lens_list=seq_lens,
            max_query_len=max(query_lens), max_seq_len=max(seq_lens))
        input_ids = torch.tensor(list(chain.from_iterable(r.token_ids for r in reqs)),
                                 dtype=torch.int64)
        return StepBatch(input_ids=input_ids.to(dev), positions=positions.to(dev), meta=meta,
                         sample_rows=torch.tensor(rows, dtype=torch.int64).to(dev),
                         sampled=[reqs[i] for i in sampled_idx],
                         lora=self._lora_batch(reqs, starts.tolist()))

    def _lora_batch(self, reqs: list[ScheduledRequest], starts: list[int]) -> LoraBatch | None:
        """Group the rows of the flat batch by adapter weights: a slice when an adapter owns
        one contiguous run of rows, else an index tensor."""
        runs: dict[int, tuple[LoraWeights, list[tuple[int, int]]]] = {}
        for i, r in enumerate(reqs):
            if r.lora is not None:
                weights = self._pinned_lora(r)
                spans = runs.setdefault(id(weights), (weights, []))[1]
                if spans and spans[-1][1] == starts[i]:  # neighbours merge into one slice
                    spans[-1] = (spans[-1][0], starts[i + 1])
                else:
                    spans.append((starts[i], starts[i + 1]))
        if not runs:
            return None
        groups = []
        for weights, spans in runs.values():
            if len(spans) == 1:
                rows = slice(*spans[0])
            else:
                rows = torch.cat([torch.arange(a, b) for a, b in spans]).to(self.device)
            groups.append((weights, rows))
        return LoraBatch(groups)

    def unrunnable(self, reqs: list[ScheduledRequest]) -> dict[str, str]:
        """Requests naming an adapter that is not loaded (and not pinned by an earlier step)."""
        return {r.request_id: f"LoRA adapter {r.lora!r} is not loaded"
                for r in reqs if r.lora is not None
                and r.request_id not in self.request_loras and self.lora_store.get(r.lora) is None}

    def _pinned_lora(self, req: ScheduledRequest) -> LoraWeights:
        weights = self.request_loras.get(req.request_id)
        if weights is None:
            weights = self.lora_store.get(req.lora)
            if weights is None:
                raise ValueError(f"request {req.request_id}: LoRA adapter {req.lora!r} "
                                 "is not loaded")
            self.request_loras[req.request_id] = weights
        return weights

    def _check(self, reqs: list[ScheduledRequest], seq_lens: list[int]) -> None:
        vocab, max_pos = self.cfg.vocab_size, self.cfg.max_position
        for r, s in zip(reqs, seq_lens):
            if not r.token_ids:
                raise ValueError(f"request {r.request_id}: scheduled with no tokens")
            if s > max_pos:
                raise ValueError(f"request {r.request_id}: {s} tokens exceed the context ({max_pos})")
            if len(r.block_ids) * self.block_size < s:
                raise ValueError(f"request {r.request_id}: {len(r.block_ids)} blocks cannot hold {s} tokens")
            if min(r.token_ids) < 0 or max(r.token_ids) >= vocab:
                raise ValueError(f"request {r.request_id}: token id outside the vocabulary ({vocab})")

    # ---- swap / copy ---------------------------------------------------------------------
    def _swap_out(self, pairs: list[tuple[int, int]]) -> None:
        if pairs:
            self._move(pairs, self.kv_caches, self.cpu_caches)

    def _swap_in(self, pairs: list[tuple[int, int]]) -> None:
        if pairs:
            self._move(pairs, self.cpu_caches, self.kv_caches)

    def _copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        if pairs:
            self._move(pairs, self.kv_caches, self.kv_caches)

    @staticmethod
    def _move(pairs, src_caches, dst_caches) -> None:
        if not src_caches or not dst_caches:
            raise ValueError("block swap requested but no swap space is allocated")
        src_dev, dst_dev = src_caches[0][0].device, dst_caches[0][0].device
        src = torch.tensor([p[0] for p in pairs], dtype=torch.int64, device=src_dev)
        dst = torch.tensor([p[1] for p in pairs], dtype=torch.int64, device=dst_dev)
        # Only host->device copies may be asynchronous: a device->host result is read at once.
        async_copy = dst_dev.type == "cuda"
        for (src_k, src_v), (dst_k, dst_v) in zip(src_caches, dst_caches):
            for s_cache, d_cache in ((src_k, dst_k), (src_v, dst_v)):
                d_cache.index_copy_(0, dst, s_cache.index_select(0, src).to(
                    dst_dev, non_blocking=async_copy))
