"""An Executor without a model: it sleeps per a cost model and emits synthetic tokens.

It still keeps a "KV cache": every slot stores a fingerprint chained over all tokens and
positions up to it, read back through the block table exactly like attention reads K/V. The
sampled token is a function of the last fingerprint, so a wrong block table, a bad prefix hit
or a lost swap changes the output, just as it would with a real model. Outputs depend only on
the context (and on SamplingParams.seed when set), like greedy decoding.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from builtin_engine.core.config import EngineConfig
from builtin_engine.core.executor import SchedulerOutput

_MASK = (1 << 64) - 1
_ROOT = 0x6A09E667F3BCC908
FIRST_TOKEN_ID = 100  # keeps synthetic ids clear of special tokens (bos, eos, ...)
# Per-token K/V bytes of a 30-layer, 3-KV-head, 64-dim float32 model (SmolLM2-135M-like):
# 30 * 2 * 3 * 64 * 4. Override with config.extra["sim_kv_bytes_per_token"].
DEFAULT_KV_BYTES_PER_TOKEN = 46080


def _mix(h: int, a: int, b: int) -> int:
    """splitmix64 finaliser over (h, a, b): cheap, well spread, deterministic."""
    h = (h ^ ((a * 0x9E3779B97F4A7C15 + b) & _MASK)) & _MASK
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


class SimulatedExecutor:
    def __init__(self, config: EngineConfig, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self.block_size = config.block_size
        self.output_vocab_size = max(config.sim_vocab_size, FIRST_TOKEN_ID + 1)
        self._sleep = sleep
        self._dev: list[int] = []
        self._cpu: list[int] = []
        self.num_steps = 0
        self.busy_s = 0.0  # modelled compute time, summed
        self.num_released = 0

    def num_blocks_for(self, config: EngineConfig) -> tuple[int, int]:
        per_block = int(config.extra.get("sim_kv_bytes_per_token", DEFAULT_KV_BYTES_PER_TOKEN))
        per_block *= config.block_size
        device = config.num_blocks or int(config.kv_cache_memory_gib * 2**30 // per_block)
        cpu = int(config.swap_space_gib * 2**30 // per_block)
        self._dev = [0] * (device * self.block_size)
        self._cpu = [0] * (cpu * self.block_size)
        return device, cpu

    def execute(self, out: SchedulerOutput) -> dict[str, int | list[int]]:
        self._apply_block_moves(out)
        sampled: dict[str, int | list[int]] = {}
        for s in out.scheduled:
            drafts = s.spec_token_ids
            hashes = self._run_tokens(s.token_ids, s.start_pos, s.block_ids, len(drafts) + 1)
            if not s.sample:
                continue
            targets = [self._token(h, s) for h in hashes]
            if not drafts:
                sampled[s.request_id] = targets[0]
                continue
            accepted = 0  # drafts verified like the model runner's: the matching run
            while accepted < len(drafts) and drafts[accepted] == targets[accepted]:
                accepted += 1
            sampled[s.request_id] = targets[:accepted + 1]
        cost = self.step_cost(out)
        self.num_steps += 1
        self.busy_s += cost
        if cost > 0:
            self._sleep(cost)
        return sampled

    def _token(self, h: int, s) -> int:
        salt = s.params.seed if s.params.seed is not None else 0
        span = self.output_vocab_size - FIRST_TOKEN_ID
        return FIRST_TOKEN_ID + _mix(h, self.config.seed, salt) % span

    def release(self, request_id: str) -> None:
        self.num_released += 1  # stateless per request: nothing to drop

    def step_cost(self, out: SchedulerOutput) -> float:
        cfg = self.config
        prefill_tokens = num_decodes = context = 0
        for s in out.scheduled:
            n = len(s.token_ids)
            if n == 1 and s.num_output_tokens > 0:
                num_decodes += 1
                context += s.start_pos + 1
            else:
                prefill_tokens += n
        cost = prefill_tokens * cfg.sim_prefill_s_per_token
        if num_decodes:
            cost += (cfg.sim_decode_base_s + num_decodes * cfg.sim_decode_s_per_seq
                     + context * cfg.sim_decode_s_per_kv_token)
        return cost

    def _apply_block_moves(self, out: SchedulerOutput) -> None:
        bs = self.block_size
        for dev, cpu in out.blocks_to_swap_out:
            self._cpu[cpu * bs:(cpu + 1) * bs] = self._dev[dev * bs:(dev + 1) * bs]
        for cpu, dev in out.blocks_to_swap_in:
            self._dev[dev * bs:(dev + 1) * bs] = self._cpu[cpu * bs:(cpu + 1) * bs]
        for src, dst in out.blocks_to_copy:
            self._dev[dst * bs:(dst + 1) * bs] = self._dev[src * bs:(src + 1) * bs]

    def _run_tokens(self, token_ids: list[int], start_pos: int, block_ids: list[int],
                    num_last: int = 1) -> list[int]:
        """Fingerprint the tokens into their slots; returns the last num_last fingerprints."""
        bs, kv = self.block_size, self._dev
        if (start_pos + len(token_ids) + bs - 1) // bs > len(block_ids):
            raise RuntimeError(f"block table of {len(block_ids)} blocks cannot hold "
                               f"{start_pos + len(token_ids)} tokens")
        if start_pos:
            prev = start_pos - 1
            h = kv[block_ids[prev // bs] * bs + prev % bs]
        else:
            h = _ROOT
        last = []
        first_kept = start_pos + len(token_ids) - num_last
        for pos, token in enumerate(token_ids, start_pos):
            h = _mix(h, token, pos)
            kv[block_ids[pos // bs] * bs + pos % bs] = h
            if pos >= first_kept:
                last.append(h)
        return last
