"""Token log-probabilities: computed from the model's raw next-token distribution (before
penalties, bias, temperature and truncation, as vLLM reports them) and rendered in OpenAI's
chat and completions shapes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP_LOGPROBS = 20


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]]  # the most likely tokens, best first


def raw_logprobs(logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """log_softmax of the given rows, taken before the sampler edits the logits in place."""
    return logits[rows].float().log_softmax(dim=-1)


def pick(logprobs: torch.Tensor, tokens: list[int], num_top: list[int]) -> list[TokenLogprob]:
    """One entry per row: the sampled token's logprob and the row's num_top best tokens."""
    chosen = logprobs[torch.arange(len(tokens)), torch.tensor(tokens)].tolist()
    k = max(num_top, default=0)
    top_values, top_ids = (logprobs.topk(k, dim=-1) if k else (None, None))
    out = []
    for i, (token, value, n) in enumerate(zip(tokens, chosen, num_top)):
        top = list(zip(top_ids[i, :n].tolist(), top_values[i, :n].tolist())) if n else []
        out.append(TokenLogprob(token, value, top))
    return out


def token_text(tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def chat_logprobs(entries: list[TokenLogprob], tokenizer) -> dict:
    def item(token_id: int, logprob: float) -> dict:
        text = token_text(tokenizer, token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {"content": [{**item(e.token_id, e.logprob),
                         "top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]}


def completion_logprobs(entries: list[TokenLogprob], tokenizer, offset: int = 0) -> dict:
    tokens, offsets = [], []
    for e in entries:
        text = token_text(tokenizer, e.token_id)
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{token_text(tokenizer, t): lp for t, lp in e.top}
                             for e in entries],
            "text_offset": offsets}
