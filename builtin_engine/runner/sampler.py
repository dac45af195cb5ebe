"""Next-token selection for a batch: penalties, logit bias, grammar masks, greedy, temperature,
top-k, top-p, min_tokens.

Rows with a grammar (structured output, tool calls) get the bitmask their matcher prepared in
the background during the forward pass; after sampling each matcher is handed its token and
starts on the next mask. Rows without one pay nothing.

Random draws use the exponential-race form of categorical sampling (argmax of p / E with
E ~ Exp(1)), so each seeded request consumes exactly one vector of noise from its own
generator per step and its tokens do not depend on what else is in the batch.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from builtin_engine.core.sampling_params import SamplingParams
from builtin_engine.structured.matcher_pool import apply_bitmasks


class Sampler:
    def __init__(self, stop_token_ids: Iterable[int] = ()):
        # Ids that end a turn besides eos (e.g. <|endoftext|>); min_tokens holds them back too.
        self.stop_token_ids = frozenset(stop_token_ids)

    def sample(self, logits: torch.Tensor, params: list[SamplingParams],
               generators: list[torch.Generator | None], num_output_tokens: list[int],
               eos_token_id: int | None,
               histories: list[tuple[list[int], int] | None] | None = None) -> list[int]:
        """`histories[i]` is (prompt + output ids, prompt length) for rows with penalties."""
        if histories is not None:
            self._apply_penalties(logits, params, histories)
        self._add_logit_bias(logits, params)
        grammar_rows = [i for i, p in enumerate(params) if p.grammar is not None]
        if grammar_rows:
            apply_bitmasks(logits, grammar_rows, [params[i].grammar.bitmask() for i in grammar_rows])
        self._mask_stops_before_min_tokens(logits, params, num_output_tokens, eos_token_id)
        # max's indices are argmax's (the first of equal maxima), 2.5x faster on CPU:
        # [64, 49152] float32 on 2 cores, 0.88 against 2.27 ms
        tokens = logits.max(dim=-1).indices
        random_rows = [i for i, p in enumerate(params) if not p.greedy]
        if random_rows:
            rows = torch.tensor(random_rows, device=logits.device)
            probs = self._probs(logits[rows], [params[i] for i in random_rows])
            tokens[rows] = self._draw(probs, [generators[i] for i in random_rows])
        tokens = tokens.tolist()
        for i in grammar_rows:
            params[i].grammar.advance(tokens[i])
        return tokens

    @staticmethod
    def _apply_penalties(logits: torch.Tensor, params: list[SamplingParams],
                         histories: list[tuple[list[int], int] | None]) -> None:
        vocab = logits.shape[1]
        for row, (p, history) in enumerate(zip(params, histories)):
            if history is None or not p.has_penalties:
                continue
            ids, num_prompt = history
            if p.repetition_penalty != 1.0 and ids:
                seen = torch.tensor(sorted(set(ids)), device=logits.device).clamp_(0, vocab - 1)
                values = logits[row, seen]
                logits[row, seen] = torch.where(values > 0, values / p.repetition_penalty,
                                                values * p.repetition_penalty)
            outputs = ids[num_prompt:]
            if outputs and (p.presence_penalty or p.frequency_penalty):
                counts = torch.bincount(torch.tensor(outputs, device=logits.device),
                                        minlength=vocab)[:vocab].to(logits.dtype)
                logits[row] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)

    @staticmethod
    def _add_logit_bias(logits: torch.Tensor, params: list[SamplingParams]) -> None:
        rows, cols, values = [], [], []
        for i, p in enumerate(params):
            for token, bias in p.logit_bias.items():
                if 0 <= token < logits.shape[1]:
                    rows.append(i)
                    cols.append(token)
                    values.append(bias)
        if rows:
            logits[rows, cols] += torch.tensor(values, device=logits.device, dtype=logits.dtype)

    def _mask_stops_before_min_tokens(self, logits, params, num_output_tokens, eos_token_id):
        rows, cols = [], []
        for i, (p, produced) in enumerate(zip(params, num_output_tokens)):
            if produced >= p.min_tokens:
                continue
            stops = set(p.stop_token_ids) | self.stop_token_ids
            if eos_token_id is not None:
                stops.add(eos_token_id)
            stops = [t for t in stops if 0 <= t < logits.shape[1]]
            rows.extend([i] * len(stops))
            cols.extend(stops)
        if rows:
            logits[rows, cols] = float("-inf")

    @staticmethod
    def _probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        device = logits.device
        temps = torch.tensor([p.temperature for p in params], device=device, dtype=logits.dtype)
        logits = logits / temps[:, None]
        top_k = [p.top_k if p.top_k > 0 else logits.shape[1] for p in params]
        top_p = [p.top_p for p in params]
        if min(top_k) < logits.shape[1] or min(top_p) < 1.0:
            logits = _top_k_top_p(logits, torch.tensor(top_k, device=device),
                                  torch.tensor(top_p, device=device, dtype=logits.dtype))
        return torch.softmax(logits, dim=-1)

    @staticmethod
    def _draw(probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
        noise = torch.empty_like(probs)
        unseeded = [i for i, g in enumerate(generators) if g is None]
        if unseeded:
            noise[unseeded] = torch.empty(len(unseeded), probs.shape[1], device=probs.device,
                                          dtype=probs.dtype).exponential_()
        for i, generator in enumerate(generators):
            if generator is not None:
                noise[i].exponential_(generator=generator)
        return (probs / noise).max(dim=-1).indices


def _top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep each row's top_k tokens, then the smallest prefix whose mass reaches top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[1], device=logits.device)[None, :]
    sorted_logits = sorted_logits.masked_fill(ranks >= top_k[:, None], float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    # The first token always survives (its preceding mass is 0).
    sorted_logits = sorted_logits.masked_fill(mass_before >= top_p[:, None], float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(1, order, sorted_logits)
